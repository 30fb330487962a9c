package gpu

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envRequireClang makes TestKernelsCompileWithClang fail, instead of
// skipping, where no clang is found (CI installs clang-15).
const envRequireClang = "SHOAL_REQUIRE_CLANG"

// TestKernelsCompileWithClang compiles kernels.cu to PTX with clang, with
// testdata/prelude.h standing in for NVRTC's built-ins: a syntax and type
// check that needs neither a GPU nor CUDA. NVRTC remains the real compiler.
func TestKernelsCompileWithClang(t *testing.T) {
	clang, err := findClang()
	if err != nil {
		if os.Getenv(envRequireClang) == "1" {
			t.Fatalf("%s=1 but: %v", envRequireClang, err)
		}
		t.Skipf("SKIP: %v (apt-get install clang-15; %s=1 makes this a failure)", err, envRequireClang)
	}
	ptx := filepath.Join(t.TempDir(), "kernels.ptx")
	cmd := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib",
		"--cuda-gpu-arch=sm_80", "-fms-extensions", "-include", filepath.Join("testdata", "prelude.h"),
		"-S", "-o", ptx, "kernels.cu")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s:\n%s", strings.Join(cmd.Args, " "), out)
	code, err := os.ReadFile(ptx)
	require.NoError(t, err)
	var entries []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:\.visible\s+)?\.entry\s+(\w+)\(`).FindAllStringSubmatch(string(code), -1) {
		entries = append(entries, m[1])
	}
	for _, name := range kernelNames {
		assert.Contains(t, entries, name, "no .entry for %s in the PTX", name)
	}
}

// findClang returns clang-15, else clang, from PATH.
func findClang() (string, error) {
	for _, name := range []string{"clang-15", "clang"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("neither clang-15 nor clang is on PATH")
}

// TestEveryKernelNameIsDefined checks that kernelNames and the kernels
// defined in kernels.cu are the same set.
func TestEveryKernelNameIsDefined(t *testing.T) {
	for _, name := range kernelNames {
		re := regexp.MustCompile(`extern "C" __global__ void ` + regexp.QuoteMeta(name) + `\(`)
		assert.True(t, re.MatchString(kernelSource), "kernel %s is not defined in kernels.cu", name)
	}
	known := make(map[string]bool)
	for _, name := range kernelNames {
		assert.False(t, known[name], "%s is listed twice in kernelNames", name)
		known[name] = true
	}
	code := stripComments(kernelSource)
	global := regexp.MustCompile(`__global__\s+\w+\s+(\w+)\s*\(`)
	defs := global.FindAllStringSubmatch(code, -1)
	assert.Equal(t, strings.Count(code, "__global__"), len(defs),
		"a __global__ in kernels.cu is not followed by a definition this test can parse")
	for _, m := range defs {
		assert.True(t, known[m[1]], "kernel %s of kernels.cu is not in kernelNames", m[1])
	}
}

// stripComments returns src without its // and /* */ comments.
func stripComments(src string) string {
	return regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`).ReplaceAllString(src, "")
}

// TestKernelSourceHasNoInclude: NVRTC has no CUDA headers to include on
// the GPU machines, and clang's check runs with none.
func TestKernelSourceHasNoInclude(t *testing.T) {
	lines := regexp.MustCompile(`(?m)^\s*#\s*include.*$`).FindAllString(kernelSource, -1)
	assert.Empty(t, lines, "kernels.cu includes headers")
}
