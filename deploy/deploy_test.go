// Package deploy holds the deployment recipes' tests: the Slurm batch
// script run under a fake srun with a real shoal binary, and the
// Kubernetes manifests checked against Kubernetes' JSON schema and against
// the flags shoal has. See README.md.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// buildDir is where shoalBinary builds, removed by TestMain; "" until then.
var buildDir string

// shoalBinary builds cmd/shoal once for the package's tests.
var shoalBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "shoal-deploy-test-")
	if err != nil {
		return "", err
	}
	buildDir = dir
	bin := filepath.Join(dir, "shoal")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shoal")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func buildShoal(t *testing.T) string {
	t.Helper()
	bin, err := shoalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// flagLine matches a flag in the output of `shoal SUB --help`.
var flagLine = regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)

// shoalFlags returns the flags `shoal sub --help` lists.
func shoalFlags(t *testing.T, bin, sub string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// --help exits 0 or 2 depending on the flag package's handling: the
	// listing is what counts.
	out, _ := exec.CommandContext(ctx, bin, sub, "--help").CombinedOutput()
	flags := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) < 10 {
		t.Fatalf("shoal %s --help lists %d flags:\n%s", sub, len(flags), out)
	}
	return flags
}

// flagNames returns the names of the flags in args ("--name=v", "--name",
// "-name"); values given as separate words are skipped by the caller's
// convention of always writing --name=value.
func flagNames(args []string) []string {
	var names []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		names = append(names, name)
	}
	return names
}

// checkFlags fails for every flag in args that `shoal sub` does not have.
func checkFlags(t *testing.T, where, sub string, args []string, known map[string]map[string]bool) {
	t.Helper()
	flags, ok := known[sub]
	if !ok {
		t.Errorf("%s: shoal %s: not a subcommand this test knows (ps, worker)", where, sub)
		return
	}
	for _, name := range flagNames(args) {
		if !flags[name] {
			t.Errorf("%s: shoal %s has no flag --%s", where, sub, name)
		}
	}
}

func knownFlags(t *testing.T) map[string]map[string]bool {
	bin := buildShoal(t)
	return map[string]map[string]bool{"ps": shoalFlags(t, bin, "ps"), "worker": shoalFlags(t, bin, "worker")}
}

// ---- Slurm ----

const sbatch = "slurm/shoal.sbatch"

func TestSlurmScriptSyntax(t *testing.T) {
	out, err := exec.Command("bash", "-n", sbatch).CombinedOutput()
	if err != nil {
		t.Fatalf("bash -n %s: %v\n%s", sbatch, err, out)
	}
}

// TestSlurmScriptAsksForItsSignal: the recipe asks Slurm to send SIGTERM
// to its batch shell (B:) before the time limit, which the script's trap
// passes to the workers' step alone, so that rank 0 evaluates and the
// shards write their shutdown checkpoint (issue 44, item 10). TestRealSlurm
// checks what follows on a real Slurm, but its time-limit job gives the
// signal on sbatch's command line, which overrides the script's own.
func TestSlurmScriptAsksForItsSignal(t *testing.T) {
	src, err := os.ReadFile(sbatch)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#SBATCH --signal=B:TERM@[0-9]+\s*$`).Match(src) {
		t.Errorf("%s has no line #SBATCH --signal=B:TERM@<seconds>: at its time limit Slurm would kill the job's steps without a signal the script passes on", sbatch)
	}
}

// scriptArgs matches the lines of the script that add shoal flags to its
// arrays, and a flag in them.
var (
	scriptArgs = regexp.MustCompile(`^\s*(both|sec|worker|ps)_args(\+)?=\((.*)\)`)
	scriptFlag = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	psCmdFlag  = regexp.MustCompile(`"\$0" ps (.*)`)
)

// TestSlurmScriptFlags checks every shoal flag the script can pass, in
// every branch, against shoal ps --help and shoal worker --help.
func TestSlurmScriptFlags(t *testing.T) {
	known := knownFlags(t)
	src, err := os.ReadFile(sbatch)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	n := 0
	for i, line := range lines {
		var subs []string
		var text string
		if m := scriptArgs.FindStringSubmatch(line); m != nil {
			text = m[3]
			switch m[1] {
			case "ps":
				subs = []string{"ps"}
			case "worker":
				subs = []string{"worker"}
			default: // both_args, sec_args go to both
				subs = []string{"ps", "worker"}
			}
		} else if m := psCmdFlag.FindStringSubmatch(line); m != nil {
			text, subs = m[1], []string{"ps"}
		} else if strings.Contains(line, "extra+=(") {
			text, subs = line, []string{"ps"}
		} else {
			continue
		}
		for _, f := range scriptFlag.FindAllStringSubmatch(text, -1) {
			n++
			for _, sub := range subs {
				if !known[sub][f[1]] {
					t.Errorf("%s:%d: shoal %s has no flag --%s", sbatch, i+1, sub, f[1])
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d shoal flags in %s: has the script's layout changed?", n, sbatch)
	}
}

// freePorts returns a base port such that base..base+n-1 are free for TCP
// and UDP now. It looks below the usual ephemeral range (32768-60999), so
// that the ports the processes of the run (and others on the machine) are
// given for port 0 do not take them meanwhile.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	start := 20000 + int(time.Now().UnixNano()%10000)
	for base := start; base+n <= 32000; base += n {
		if portsFree(base, n) {
			return base
		}
	}
	t.Fatalf("no %d free ports in a row in %d..32000", n, start)
	return 0
}

func portsFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		tl, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		ul, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		tl.Close()
		if err != nil {
			return false
		}
		ul.Close()
	}
	return true
}

// runScript runs shoal.sbatch with bash under the fake srun and scontrol
// of slurm/testdata/bin, as sbatch would on a one-node allocation of
// SLURM_NTASKS=2, with env added; it returns the output and every shoal
// command line the script ran.
func runScript(t *testing.T, env ...string) (string, [][]string) {
	t.Helper()
	bin := buildShoal(t)
	dir := t.TempDir()
	fake, err := filepath.Abs("slurm/testdata/bin")
	if err != nil {
		t.Fatal(err)
	}
	// SHOAL_BIN: a wrapper that writes its arguments, NUL-separated, to a
	// file of its own (processes started at once cannot interleave them)
	// and runs shoal.
	logs := filepath.Join(dir, "shoal-args")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "shoal-logged")
	script := fmt.Sprintf("#!/bin/bash\nprintf '%%s\\0' \"$@\" >%q/$$\nexec %q \"$@\"\n", logs, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err = filepath.Abs(sbatch)
	if err != nil {
		t.Fatal(err)
	}
	// The environment of this process, less anything a real launcher set.
	var base []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SLURM_") || strings.HasPrefix(name, "SHOAL_") || strings.HasPrefix(name, "OMPI_") ||
			slices.Contains([]string{"PATH", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}, name) {
			continue
		}
		base = append(base, kv)
	}
	ports := freePorts(t, 4) // shards base, base+1; their gossip base+2, base+3
	base = append(base,
		"PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SLURM_JOB_ID=4242", "SLURM_JOB_NODELIST=localhost", "SLURM_JOB_NUM_NODES=1",
		"SLURM_NTASKS=2", "SLURM_CPUS_PER_TASK=1", "SLURM_PROCID=0",
		"SHOAL_BIN="+wrapper, "SHOAL_DATASET=synthetic", "SHOAL_STEPS=20", "SHOAL_LOG_LEVEL=warn",
		"SHOAL_PS_PORT="+strconv.Itoa(ports), "SHOAL_GOSSIP_PORT="+strconv.Itoa(ports+2),
		"SHOAL_MASTER_PORT="+strconv.Itoa(ports+2),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = dir
	cmd.Env = append(base, env...)
	// The script, the fake srun and every shoal in a process group of their
	// own, killed whole on the deadline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// Whatever is left of the group (nothing, when the script is right).
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		t.Fatalf("shoal.sbatch still running after 2 min; output:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("shoal.sbatch: %v; output:\n%s", err, out.String())
	}
	var calls [][]string
	files, err := os.ReadDir(logs)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(logs, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"))
	}
	return out.String(), calls
}

// accuracyLine is what worker 0 (ring: rank 0) prints at the end.
var accuracyLine = regexp.MustCompile(`(?m)^test: loss [0-9.]+, accuracy ([0-9.]+)% \(1000 samples of synthetic/test(; [^)]*)?\)$`)

func TestSlurmScriptRuns(t *testing.T) {
	known := knownFlags(t)
	for _, tc := range []struct {
		mode        string
		ps, workers int
	}{
		{"sync", 2, 2},
		{"async", 1, 2},
		{"ring", 0, 2},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			out, calls := runScript(t, "SHOAL_MODE="+tc.mode, "SHOAL_SERVERS="+strconv.Itoa(max(tc.ps, 1)))
			m := accuracyLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no test accuracy line in the output:\n%s", out)
			}
			if acc, _ := strconv.ParseFloat(m[1], 64); acc < 50 {
				t.Errorf("test accuracy %s%% after 20 steps on the synthetic set: want >= 50%%", m[1])
			}
			count := map[string]int{}
			for _, c := range calls {
				if len(c) == 0 {
					continue
				}
				count[c[0]]++
				checkFlags(t, "shoal.sbatch ran", c[0], c[1:], known)
				if c[0] == "ps" {
					checkLateRanksWaited(t, c[1:])
				}
			}
			if count["ps"] != tc.ps || count["worker"] != tc.workers {
				t.Errorf("the script ran %d shoal ps and %d shoal worker: want %d and %d\n%q", count["ps"], count["worker"], tc.ps, tc.workers, calls)
			}
			if tc.mode != "ring" && !strings.Contains(out, "shoal.sbatch: done") {
				t.Errorf("no final line from the script:\n%s", out)
			}
		})
	}
}

// minExitWait is the least --exit-wait the recipe may give its shards:
// on real Slurm under load a rank started 40 s after the others, and the
// shards' default (30 s) would have ended the job without it (issue 44,
// item 11).
const minExitWait = 5 * time.Minute

// checkLateRanksWaited checks that a shard's argv waits at least
// minExitWait for ranks that have not joined.
func checkLateRanksWaited(t *testing.T, args []string) {
	t.Helper()
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--exit-wait=")
		if !ok && a == "--exit-wait" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < minExitWait {
			t.Errorf("the script gave shoal ps --exit-wait %q: want a duration of at least %v, so that a rank that starts late still joins", v, minExitWait)
		}
		return
	}
	t.Errorf("the script gave shoal ps no --exit-wait (the default is 30 s): want at least %v, so that a rank that starts late still joins\n%q", minExitWait, args)
}

func TestSlurmScriptRefusesBadMode(t *testing.T) {
	cmd := exec.Command("bash", sbatch)
	cmd.Env = append(os.Environ(), "SHOAL_MODE=allreduce", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=localhost")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "SHOAL_MODE=allreduce") {
		t.Fatalf("SHOAL_MODE=allreduce: %v, %s; want exit 2 naming it", err, out)
	}
}

// ---- Kubernetes ----

const schemaDir = "kubernetes/testdata/schema/v1.30.0-standalone-strict"

// schemaFiles names the schema of each apiVersion and kind the manifests use.
var schemaFiles = map[string]string{
	"v1/Service":          "service-v1.json",
	"apps/v1/StatefulSet": "statefulset-apps-v1.json",
	"batch/v1/Job":        "job-batch-v1.json",
}

var schemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4) // the dialect of OpenAPI v2's schemas
	out := map[string]*jsonschema.Schema{}
	for gvk, file := range schemaFiles {
		f, err := os.Open(filepath.Join(schemaDir, file))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		url := "file:///" + file
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
		if out[gvk], err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	return out, nil
})

// manifest is one YAML document of a file.
type manifest struct {
	file  string
	index int
	doc   map[string]any
}

func (m manifest) String() string { return fmt.Sprintf("%s, document %d", m.file, m.index+1) }

func (m manifest) gvk() string {
	av, _ := m.doc["apiVersion"].(string)
	kind, _ := m.doc["kind"].(string)
	return av + "/" + kind
}

func (m manifest) name() string {
	meta, _ := m.doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	return name
}

func loadManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no kubernetes/*.yaml")
	}
	var out []manifest
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(f)
		for i := 0; ; i++ {
			var doc map[string]any
			err := dec.Decode(&doc)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				t.Fatalf("%s, document %d: %v", file, i+1, err)
			}
			if doc == nil {
				f.Close()
				t.Fatalf("%s, document %d: empty", file, i+1)
			}
			out = append(out, manifest{file, i, doc})
		}
		f.Close()
	}
	return out
}

// validate checks doc against the schema of its apiVersion and kind.
func validate(doc map[string]any) error { return validateAs(manifest{doc: doc}.gvk(), doc) }

// validateAs checks doc against the schema of gvk (apiVersion/kind).
func validateAs(gvk string, doc map[string]any) error {
	sch, err := schemas()
	if err != nil {
		return err
	}
	s, ok := sch[gvk]
	if !ok {
		return fmt.Errorf("no schema for %s here (add it to schemaFiles and %s)", gvk, schemaDir)
	}
	// Through JSON, as kubectl sends it: YAML's ints become JSON numbers.
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

func TestKubernetesSchema(t *testing.T) {
	ms := loadManifests(t)
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.gvk()] = true
		if err := validate(m.doc); err != nil {
			t.Errorf("%v (%s %s): %v", m, m.gvk(), m.name(), err)
		}
	}
	for gvk := range schemaFiles {
		if !seen[gvk] {
			t.Errorf("no manifest of %s: its schema is unused", gvk)
		}
	}
}

// deepCopy copies a decoded YAML document.
func deepCopy(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// podSpec returns the pod spec of a Job or StatefulSet document.
func podSpec(doc map[string]any) map[string]any {
	spec, _ := doc["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	ps, _ := tmpl["spec"].(map[string]any)
	return ps
}

func containers(doc map[string]any) []map[string]any {
	var out []map[string]any
	cs, _ := podSpec(doc)["containers"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// TestKubernetesSchemaRejects proves the check is a real one: a mistyped
// field, a value of the wrong type, a missing required field and a wrong
// kind all fail, at any depth.
func TestKubernetesSchemaRejects(t *testing.T) {
	var job map[string]any
	for _, m := range loadManifests(t) {
		if m.gvk() == "batch/v1/Job" {
			job = m.doc
			break
		}
	}
	if job == nil {
		t.Fatal("no Job manifest")
	}
	for _, tc := range []struct {
		name   string
		change func(d map[string]any)
		want   string // in the error
	}{
		{"unknown top-level field", func(d map[string]any) { d["metdata"] = map[string]any{"name": "x"} }, "metdata"},
		{"unknown field in the Job spec", func(d map[string]any) { d["spec"].(map[string]any)["completionsMode"] = "Indexed" }, "completionsMode"},
		{"unknown field in a container", func(d map[string]any) { containers(d)[0]["argz"] = []any{"worker"} }, "argz"},
		{"string for an integer", func(d map[string]any) { d["spec"].(map[string]any)["completions"] = "4" }, "completions"},
		{"integer for a string", func(d map[string]any) { containers(d)[0]["image"] = 7 }, "image"},
		{"object for a list", func(d map[string]any) { containers(d)[0]["args"] = map[string]any{"worker": true} }, "args"},
		{"env var without a name", func(d map[string]any) {
			containers(d)[0]["env"] = []any{map[string]any{"value": "1"}}
		}, "name"},
		{"wrong kind for the schema", func(d map[string]any) { d["kind"] = "Jobs" }, "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deepCopy(t, job)
			if err := validateAs("batch/v1/Job", d); err != nil {
				t.Fatalf("the unchanged copy fails: %v", err)
			}
			tc.change(d)
			err := validateAs("batch/v1/Job", d)
			if err == nil {
				t.Fatal("the schema check passes it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}
}

// TestKubernetesFlags checks the flags every shoal container passes, and
// that the numbers that must agree across the manifests do.
func TestKubernetesFlags(t *testing.T) {
	known := knownFlags(t)
	ms := loadManifests(t)
	flagValue := func(args []string, name string) (string, bool) {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	env := func(c map[string]any, name string) string {
		es, _ := c["env"].([]any)
		for _, e := range es {
			if m, _ := e.(map[string]any); m["name"] == name {
				v, _ := m["value"].(string)
				return v
			}
		}
		return ""
	}
	type shoalC struct {
		m    manifest
		args []string
		c    map[string]any
	}
	var ps, workers []shoalC
	for _, m := range ms {
		for _, c := range containers(m.doc) {
			if img, _ := c["image"].(string); !strings.HasPrefix(img, "shoal:") {
				continue
			}
			if _, ok := c["command"]; ok {
				t.Errorf("%v: the image has no shell; use args with the image's entrypoint /bin/shoal", m)
			}
			raw, _ := c["args"].([]any)
			var args []string
			for _, a := range raw {
				s, ok := a.(string)
				if !ok {
					t.Errorf("%v: arg %v is not a string", m, a)
				}
				args = append(args, s)
			}
			if len(args) == 0 {
				t.Errorf("%v: no args", m)
				continue
			}
			for _, a := range args[1:] {
				if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") {
					t.Errorf("%v: %s: write flags as --name=value", m, a)
				} else if !strings.HasPrefix(a, "--") {
					t.Errorf("%v: %q: a word that is not a flag (write --name=value)", m, a)
				}
			}
			checkFlags(t, m.String(), args[0], args[1:], known)
			switch args[0] {
			case "ps":
				ps = append(ps, shoalC{m, args, c})
			case "worker":
				workers = append(workers, shoalC{m, args, c})
			}
		}
	}
	if len(ps) != 1 || len(workers) != 2 {
		t.Fatalf("found %d shoal ps and %d shoal worker containers: want 1 and 2 (PS workers, ring)", len(ps), len(workers))
	}
	p := ps[0]
	replicas := fmt.Sprint(p.m.doc["spec"].(map[string]any)["replicas"])
	name := p.m.name()
	if v, _ := flagValue(p.args, "servers"); v != replicas {
		t.Errorf("%v: --servers=%s but replicas %s", p.m, v, replicas)
	}
	psWorkers, _ := flagValue(p.args, "workers")
	for _, w := range workers {
		spec := w.m.doc["spec"].(map[string]any)
		if spec["completionMode"] != "Indexed" {
			t.Errorf("%v: completionMode %v: want Indexed", w.m, spec["completionMode"])
		}
		n := fmt.Sprint(spec["completions"])
		if fmt.Sprint(spec["parallelism"]) != n || env(w.c, "SHOAL_WORLD_SIZE") != n {
			t.Errorf("%v: completions %s, parallelism %v, SHOAL_WORLD_SIZE %q: want all equal", w.m, n, spec["parallelism"], env(w.c, "SHOAL_WORLD_SIZE"))
		}
		mode, _ := flagValue(w.args, "mode")
		if mode == "ring" {
			continue
		}
		if psWorkers != n {
			t.Errorf("%v: %s workers, but the shards have --workers=%s", w.m, n, psWorkers)
		}
		if psMode, _ := flagValue(p.args, "mode"); psMode != mode {
			t.Errorf("%v: --mode=%s, the shards --mode=%s", w.m, mode, psMode)
		}
		servers, _ := flagValue(w.args, "servers")
		var want []string
		k, _ := strconv.Atoi(replicas)
		for i := range k {
			want = append(want, fmt.Sprintf("%s-%d.%s:7070", name, i, name))
		}
		if servers != strings.Join(want, ",") {
			t.Errorf("%v: --servers=%s: want every shard in shard order, %s", w.m, servers, strings.Join(want, ","))
		}
		for _, f := range []string{"model", "hidden", "seed"} {
			a, _ := flagValue(w.args, f)
			b, _ := flagValue(p.args, f)
			if a != b {
				t.Errorf("%v: --%s=%s, the shards --%s=%s", w.m, f, a, f, b)
			}
		}
	}
}
