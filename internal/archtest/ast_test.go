package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule reads one parsed file (path relative to the root) and returns
// what breaks it, each naming the line.
type rule func(fset *token.FileSet, path string, f *ast.File) []string

// checkTree runs r over every non-test Go file of the repository.
func checkTree(t *testing.T, r rule) []string {
	t.Helper()
	var broken []string
	nonTestSources(t, func(path, src string) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		require.NoError(t, err, path)
		broken = append(broken, r(fset, path, f)...)
	})
	return broken
}

// checkSource runs r over one planted source, as if it lived at path.
func checkSource(t *testing.T, r rule, path, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	require.NoError(t, err)
	return r(fset, path, f)
}

func at(fset *token.FileSet, path string, pos token.Pos, what string) string {
	return fmt.Sprintf("%s:%d: %s", path, fset.Position(pos).Line, what)
}

// isCall reports whether e calls pkg.name.
func isCall(e ast.Expr, pkg string, names ...string) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok || id.Name != pkg {
		return false
	}
	for _, n := range names {
		if sel.Sel.Name == n {
			return true
		}
	}
	return false
}

// noNilProcessGroup: outside ddp/dist, nothing reads the default group
// that may be missing (dist.Default, and dist.Rank and dist.WorldSize,
// which are -1 without it): dist.Current is never nil. And no name that
// holds a *dist.ProcessGroup is compared with nil.
func noNilProcessGroup(fset *token.FileSet, path string, f *ast.File) []string {
	if strings.HasPrefix(path, "ddp/dist/") {
		return nil
	}
	groups := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if isProcessGroupType(n.Type) {
				for _, name := range n.Names {
					groups[name.Name] = true
				}
			}
		case *ast.AssignStmt:
			for i, rhs := range n.Rhs {
				if i < len(n.Lhs) && isCall(rhs, "dist", "Current", "Default", "InitProcessGroup") {
					if id, ok := n.Lhs[i].(*ast.Ident); ok {
						groups[id.Name] = true
					}
				}
			}
		}
		return true
	})
	var broken []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if isCall(n, "dist", "Default", "Rank", "WorldSize", "LocalRank") {
				broken = append(broken, at(fset, path, n.Pos(), "reads the default group that may be missing: use dist.Current()"))
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
				if isNil(pair[1]) && groups[nameOf(pair[0])] {
					broken = append(broken, at(fset, path, n.Pos(), "compares a process group with nil: a job of one process is dist.Current()'s group of one"))
				}
			}
		}
		return true
	})
	return broken
}

func isProcessGroupType(e ast.Expr) bool {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "dist" && sel.Sel.Name == "ProcessGroup"
}

func isNil(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "nil"
}

// nameOf is an identifier's name, or a selector's last name (h.group).
func nameOf(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.CallExpr:
		return nameOf(e.Fun)
	}
	return ""
}

// oneModeChoice: the ddp wrapper's step mode is chosen in one place
// (Wrap, ddp/wrap.go): elsewhere nothing makes a mode or asks which one a
// wrapper has by its type.
func oneModeChoice(fset *token.FileSet, path string, f *ast.File) []string {
	if filepath.Dir(path) != "ddp" {
		return nil
	}
	var broken []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeAssertExpr:
			if n.Type != nil && strings.Contains(exprString(n.Type), "deterministic") || exprString(n.X) == "m.mode" {
				broken = append(broken, at(fset, path, n.Pos(), "asks the mode's type: add a stepMode method instead"))
			}
		case *ast.CompositeLit:
			if exprString(n.Type) == "plainMode" && path != "ddp/wrap.go" {
				broken = append(broken, at(fset, path, n.Pos(), "makes a step mode outside Wrap"))
			}
		case *ast.CallExpr:
			if exprString(n.Fun) == "newDeterministic" && path != "ddp/wrap.go" {
				broken = append(broken, at(fset, path, n.Pos(), "makes a step mode outside Wrap"))
			}
		}
		return true
	})
	return broken
}

// crossingCalls are the calls that move a job's values between replicas:
// XLA's collectives, and the process group's bucketed and all-to-all
// forms (its AllGather and AllReduce also carry what ranks agree on).
var crossingCalls = map[string]bool{
	"xla.AllReduce": true, "xla.ReduceScatter": true, "xla.AllGather": true, "xla.Broadcast": true, "xla.AllToAll": true,
	"ReduceScatterAsync": true, "AllGatherAsync": true, "AllReduceAsync": true, "AllToAllSingle": true,
}

// oneCrossing: in the data-parallel layer every way values cross
// replicas lives in ddp/internal/crossing (and below it, the process
// group and its transports); the wrapper, ZeRO and the checkpoints call
// the seam.
func oneCrossing(fset *token.FileSet, path string, f *ast.File) []string {
	if !strings.HasPrefix(path, "ddp/") {
		return nil
	}
	for _, below := range []string{"ddp/internal/crossing/", "ddp/dist/", "ddp/internal/transport/", "ddp/mpi/"} {
		if strings.HasPrefix(path, below) {
			return nil
		}
	}
	var broken []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		name := sel.Sel.Name
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "xla" {
			name = "xla." + name
		}
		if crossingCalls[name] {
			broken = append(broken, at(fset, path, n.Pos(), "crosses replicas by "+name+": add it to the crossing seam (ddp/internal/crossing)"))
		}
		return true
	})
	return broken
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	}
	return ""
}

// goFileName is a Go file named in a comment.
var goFileName = regexp.MustCompile(`[\w./-]*\w\.go\b`)

// commentsNameRealFiles: a Go file a comment names exists, beside the
// comment's file, from the root, or anywhere in the tree by its base name
// when the comment names it bare (a file of another package).
func commentsNameRealFiles(base map[string]bool) rule {
	return func(fset *token.FileSet, path string, f *ast.File) []string {
		var broken []string
		for _, group := range f.Comments {
			for _, name := range goFileName.FindAllString(group.Text(), -1) {
				if strings.Contains(name, "://") || exists(filepath.Join(root, filepath.Dir(path), name)) || exists(filepath.Join(root, name)) ||
					!strings.Contains(name, "/") && base[name] || isForeign(name) {
					continue
				}
				broken = append(broken, at(fset, path, group.Pos(), "names "+name+", which does not exist"))
			}
		}
		return broken
	}
}

// isForeign is a file of another project a comment may cite (go-xla's,
// GoMLX's, the standard library's): a path outside this tree's folders.
func isForeign(name string) bool {
	first := strings.SplitN(name, "/", 2)[0]
	return strings.Contains(name, "/") && !exists(filepath.Join(root, first))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// baseNames is every Go file's base name in the tree.
func baseNames(t *testing.T) map[string]bool {
	names := map[string]bool{}
	sources(t, true, func(path, _ string) { names[filepath.Base(path)] = true })
	return names
}

// nilCompared: no name of names (in files under prefix) is compared with
// nil, and none of funcs is called with nil first.
func nilCompared(prefix, why string, names ...string) rule {
	return func(fset *token.FileSet, path string, f *ast.File) []string {
		if !strings.HasPrefix(path, prefix) {
			return nil
		}
		var broken []string
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
					if (n.Op == token.EQL || n.Op == token.NEQ) && isNil(pair[1]) && slices.Contains(names, nameOf(pair[0])) {
						broken = append(broken, at(fset, path, n.Pos(), "compares "+nameOf(pair[0])+" with nil: "+why))
					}
				}
			case *ast.CallExpr:
				if len(n.Args) > 1 && isNil(n.Args[0]) && slices.Contains(names, "ctx") { // f(nil, …): a context left out
					broken = append(broken, at(fset, path, n.Pos(), "passes a nil context: "+why))
				}
			}
			return true
		})
		return broken
	}
}

// TestFitnessRules: each rule holds over the tree and fails on a planted
// violation.
func TestFitnessRules(t *testing.T) {
	names := baseNames(t)
	for _, tc := range []struct {
		name          string
		rule          rule
		plantedPath   string
		planted, want string
	}{
		{"no nil process group", noNilProcessGroup, "ddp/checkpoint/planted.go",
			"package checkpoint\nfunc f() int { return dist.Default().Rank() }\n", "use dist.Current()"},
		{"no nil process group (a comparison)", noNilProcessGroup, "ddp/checkpoint/planted.go",
			"package checkpoint\nfunc f() { if g := dist.Current(); g != nil {} }\n", "compares a process group with nil"},
		{"no nil process group (a field)", noNilProcessGroup, "ddp/zero/planted.go",
			"package zero\ntype h struct{ pg *dist.ProcessGroup }\nfunc (x h) f() bool { return x.pg == nil }\n", "compares a process group with nil"},
		{"one mode choice", oneModeChoice, "ddp/planted.go",
			"package ddp\nfunc f(m *DistributedDataParallel) bool { _, ok := m.mode.(*deterministic); return ok }\n", "asks the mode's type"},
		{"one mode choice (made elsewhere)", oneModeChoice, "ddp/planted.go",
			"package ddp\nfunc f(m *DistributedDataParallel) { m.mode = plainMode{} }\n", "makes a step mode outside Wrap"},
		{"one crossing", oneCrossing, "ddp/zero/planted.go",
			"package zero\nfunc f(t *xla.Tensor) *xla.Tensor { return xla.ReduceScatter(t, xla.ReduceSum, 0) }\n", "crosses replicas by xla.ReduceScatter"},
		{"one crossing (the host)", oneCrossing, "ddp/planted.go",
			"package ddp\nfunc f(g *dist.ProcessGroup) { g.AllToAllSingle(nil, nil, nil, nil, nil) }\n", "crosses replicas by AllToAllSingle"},
		{"no nil context in the process group", nilCompared("ddp/dist/", "the Async forms queue a checked call", "ctx"), "ddp/dist/planted.go",
			"package dist\nfunc f() { run(nil, 1) }\n", "passes a nil context"},
		{"no nil rendezvous", nilCompared("ddp/launch/", "a single node is a standalone meeting", "r", "rdzv", "rendezvous"), "ddp/launch/planted.go",
			"package launch\nfunc f(r *rendezvous) bool { return r == nil }\n", "compares r with nil"},
		{"comments name real files", commentsNameRealFiles(names), "ddp/launch/planted.go",
			"package launch\n// The admission is decided in admit.go.\nfunc f() {}\n", "names admit.go, which does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Empty(t, checkTree(t, tc.rule), "the tree")
			broken := checkSource(t, tc.rule, tc.plantedPath, tc.planted)
			require.Len(t, broken, 1, "the planted violation")
			assert.Contains(t, broken[0], tc.want)
		})
	}
}

// longFunctions are the functions allowed past 60 lines, each for its
// reason: ddprun's flag table and cluster detection read as one list;
// the consolidation is one pass over a manifest; the three examples'
// training loops are their tutorials' whole loop on one page (at most 80).
var longFunctions = map[string]bool{
	"ddp/launch/config.go:ParseArgs":                true,
	"ddp/launch/detect.go:Detect":                   true,
	"ddp/zero/consolidate.go:ConsolidateCheckpoint": true,
	"examples/mnist/main.go:train":                  true,
	"examples/finetune/train.go:run":                true,
	"examples/linear/main.go:train":                 true,
}

// TestFunctionsFitAScreen: no function over 60 lines but the few above,
// and none of those over 80.
func TestFunctionsFitAScreen(t *testing.T) {
	var long []string
	nonTestSources(t, func(path, src string) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		require.NoError(t, err, path)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			name := path + ":" + fd.Name.Name
			if lines > 80 && !strings.HasPrefix(path, "ddp/launch/") || lines > 60 && !longFunctions[name] {
				long = append(long, fmt.Sprintf("%s (%d lines)", name, lines))
			}
		}
	})
	assert.Empty(t, long, "split them by what they do")
}
