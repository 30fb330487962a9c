package dl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanOrder(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		return p
	}
	envDir := filepath.Join(root, "env")
	envLib := mk("env/liba.so.1")
	aLib := mk("a/liba.so.1")
	bLib := mk("a/libb.so.2")
	stub := mk("stubs/liba.so.1")
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	s := Search{Env: envDir, Names: []string{"liba.so.1", "libb.so.2"}, Dirs: []string{filepath.Dir(aLib), empty, filepath.Dir(stub), filepath.Join(root, "missing")}}

	cands, emptyDirs := s.Plan(FileExists)
	var args []string
	for _, c := range cands {
		args = append(args, c.Arg)
	}
	assert.Equal(t, []string{envLib, "liba.so.1", "libb.so.2", aLib, bLib, stub}, args)
	assert.Equal(t, []string{empty, filepath.Join(root, "missing")}, emptyDirs)
	assert.Equal(t, "libb.so.2", cands[4].Name)

	s.NoLoader = true
	s.Refuse = func(p string) string {
		if filepath.Base(filepath.Dir(p)) == "stubs" {
			return "a stub library, never loaded"
		}
		return ""
	}
	var opened []string
	_, tried, err := Find(s, FileExists, func(c Candidate) (int, error) {
		opened = append(opened, c.Arg)
		return 0, errors.New(c.Arg + ": refused by the test")
	})
	var nf *NotFoundError
	require.ErrorAs(t, err, &nf)
	assert.Equal(t, []string{envLib, aLib, bLib}, opened, "the stub is refused before it is opened")
	require.Len(t, tried, 4)
	assert.Equal(t, Attempt{Path: stub, Err: "a stub library, never loaded"}, tried[3])
	assert.Equal(t, "refused by the test", tried[0].Err, "dlerror's leading path is not repeated")
	assert.Contains(t, err.Error(), bLib+": refused by the test")
	assert.Contains(t, err.Error(), "no liba.so.1 or libb.so.2 in: "+empty, "the names looked for are said")

	// The first library accepted wins and the failures before it are kept.
	v, tried, err := Find(s, FileExists, func(c Candidate) (string, error) {
		if c.Arg == aLib {
			return "ok", nil
		}
		return "", errors.New("no")
	})
	require.NoError(t, err)
	assert.Equal(t, "ok", v)
	assert.Equal(t, []Attempt{{Path: envLib, Err: "no"}}, tried)
}

func TestEnvFileIsTriedEvenIfMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.so")
	cands, _ := Search{Env: missing, NoLoader: true}.Plan(FileExists)
	assert.Equal(t, []Candidate{{Arg: missing}}, cands)
}

// TestOpen loads a real library (the C library's libm) and a file that is
// not one.
func TestOpen(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "libfake.so")
	require.NoError(t, os.WriteFile(fake, []byte("not an ELF file"), 0o644))
	_, err := Open(fake)
	require.Error(t, err)
	if errors.Is(err, ErrNoCgo) {
		t.Skip("built without cgo: Open has no dlopen and says so: ", err)
	}
	assert.Contains(t, err.Error(), fake)

	l, err := Open("libm.so.6")
	require.NoError(t, err)
	defer l.Close()
	cos, err := l.Sym("cos")
	require.NoError(t, err)
	assert.Contains(t, l.Path(cos), "libm")
	_, err = l.Sym("shoal_no_such_symbol")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shoal_no_such_symbol")
}
