package codesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLibrarySizes fails for a library function over MaxFuncLines lines, a library file over
// MaxFileLines or a test file over MaxTestFileLines, naming each with its size.
func TestLibrarySizes(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"), "the walk starts at the module root")
	fset := token.NewFileSet()
	var over []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "samples" || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if n := strings.Count(string(src), "\n"); n > MaxTestFileLines {
				over = append(over, rel+": "+strconv.Itoa(n)+" lines (test file)")
			}
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		if n := fset.File(f.Pos()).LineCount(); n > MaxFileLines {
			over = append(over, rel+": "+strconv.Itoa(n)+" lines (file)")
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if n > MaxFuncLines {
					over = append(over, rel+": "+fd.Name.Name+" is "+strconv.Itoa(n)+" lines")
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, over, "split these (functions <= %d lines, files <= %d lines, test files <= %d lines)",
		MaxFuncLines, MaxFileLines, MaxTestFileLines)
}
