package cpubind

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0-3", []int{0, 1, 2, 3}},
		{"3,1, 2", []int{1, 2, 3}},
		{"0-1,1-2,7", []int{0, 1, 2, 7}},
		{"1023", []int{1023}},
	} {
		got, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		back, err := Parse(Format(got))
		require.NoError(t, err)
		assert.Equal(t, got, back, "Format(%v) = %q", got, Format(got))
	}
	assert.Equal(t, "0-3,7,9-10", Format([]int{0, 1, 2, 3, 7, 9, 10}))
	for _, tc := range []struct{ in, want string }{
		{"", "an empty CPU list"},
		{"a", `"a" in a CPU list: want a CPU number 0..1023`},
		{"1,", `"" in a CPU list`},
		{"-1", `"-1" in a CPU list`},
		{"1024", `"1024" in a CPU list`},
		{"3-1", `CPU range "3-1": its end is below its start`},
		{"0-x", `"0-x" in a CPU list`},
	} {
		_, err := Parse(tc.in)
		require.Error(t, err, tc.in)
		assert.Contains(t, err.Error(), tc.want, tc.in)
	}
}

func TestSplit(t *testing.T) {
	sets, ok := Split([]int{2, 3, 5, 8, 9}, 2, 2)
	require.True(t, ok)
	assert.Equal(t, [][]int{{2, 3}, {5, 8}}, sets)
	_, ok = Split([]int{0, 1}, 3, 1)
	assert.False(t, ok, "3 processes of 1 CPU on 2 CPUs")
	_, ok = Split([]int{0, 1, 2, 3}, 2, 0)
	assert.False(t, ok)
}

func TestBindRefusesCPUsNotAllowed(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Skipf("cannot read this process's CPUs here: %v", err)
	}
	err = Bind([]int{MaxCPU})
	if allowed[len(allowed)-1] == MaxCPU {
		t.Skip("this machine has CPU 1023: no CPU number to refuse")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("CPU %d is not one this process may run on (%s)", MaxCPU, Format(allowed)))
	assert.ErrorContains(t, Bind(nil), "binding to no CPUs at all")
}

const helperEnv = "SHOAL_CPUBIND_HELPER"

// TestBindBindsEveryThread binds a process of its own (this test binary
// again, running TestBindHelper) to one CPU and checks that every thread
// it has afterwards, those it had and those it started since, may run on
// that CPU alone.
func TestBindBindsEveryThread(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Skipf("cannot read this process's CPUs here: %v", err)
	}
	if len(allowed) < 2 {
		t.Skipf("this process may run on CPU %s only: binding to it would change nothing to check", Format(allowed))
	}
	target := allowed[len(allowed)-1]
	cmd := exec.Command(os.Args[0], "-test.run=^TestBindHelper$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+strconv.Itoa(target))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var lists []string
	for line := range strings.Lines(string(out)) {
		if l, ok := strings.CutPrefix(strings.TrimSpace(line), "thread "); ok {
			lists = append(lists, l)
		}
	}
	require.GreaterOrEqual(t, len(lists), 6, "the helper's threads: %s", out)
	for _, l := range lists {
		_, cpus, _ := strings.Cut(l, ": ")
		assert.Equal(t, strconv.Itoa(target), cpus, "thread %s", l)
	}
	mine, err := Allowed()
	require.NoError(t, err)
	assert.Equal(t, allowed, mine, "binding the helper changed this process")
}

// TestBindHelper is TestBindBindsEveryThread's other process.
func TestBindHelper(t *testing.T) {
	v := os.Getenv(helperEnv)
	if v == "" {
		t.Skip("the helper process of TestBindBindsEveryThread; it runs alone there")
	}
	c, err := strconv.Atoi(v)
	require.NoError(t, err)
	require.NoError(t, Bind([]int{c}))
	// Threads started after Bind: each goroutine holds its thread while
	// it waits, so the runtime starts another for the next.
	release, started := make(chan struct{}), make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- struct{}{}
			<-release
		}()
		<-started
	}
	defer close(release)
	tids, err := threads()
	require.NoError(t, err)
	for _, tid := range tids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
		if os.IsNotExist(err) {
			continue // it has exited
		}
		require.NoError(t, err)
		for line := range strings.Lines(string(status)) {
			if l, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				fmt.Printf("thread %d: %s\n", tid, strings.TrimSpace(l))
			}
		}
	}
}
