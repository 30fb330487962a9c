package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The top layer wires: flags into configs, one call into a package, print.
// These bounds keep it that way (issue 39 brought it from 6,993 lines).
const (
	maxTopLines   = 2500 // non-test lines in cmd/shoal
	maxRunFuncLen = 40   // lines of a subcommand's run function
)

type topFile struct {
	name  string
	lines int
	file  *ast.File
}

func topLayer(t *testing.T) (*token.FileSet, []topFile) {
	t.Helper()
	dir := filepath.Join("..", "..", "cmd", "shoal")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []topFile
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, n, src, 0)
		require.NoError(t, err)
		files = append(files, topFile{name: n, lines: strings.Count(string(src), "\n"), file: f})
	}
	require.NotEmpty(t, files)
	return fset, files
}

func TestTheTopLayerStaysThin(t *testing.T) {
	fset, files := topLayer(t)
	total := 0
	for _, f := range files {
		total += f.lines
		ast.Inspect(f.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: cmd/shoal starts a goroutine: the package that owns the work starts and stops it", fset.Position(n.Pos()))
			case *ast.FuncDecl:
				if !strings.HasPrefix(n.Name.Name, "run") || n.Recv != nil {
					return true
				}
				from, to := fset.Position(n.Pos()).Line, fset.Position(n.End()).Line
				if l := to - from + 1; l > maxRunFuncLen {
					t.Errorf("%s: %s is %d lines, more than %d: a run function parses flags into a config, calls one entry point, prints",
						fset.Position(n.Pos()), n.Name.Name, l, maxRunFuncLen)
				}
			}
			return true
		})
	}
	t.Logf("cmd/shoal: %d non-test lines in %d files", total, len(files))
	if total > maxTopLines {
		t.Errorf("cmd/shoal holds %d non-test lines, more than %d: logic belongs in the package that owns it", total, maxTopLines)
	}
}
