package examples

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// ownModules are the guides' programs built once per test process, by
// guide, program and build tags (linking costs seconds).
var ownModules struct {
	sync.Mutex
	bins map[string]string
}

// buildOwnModule builds docs/own-module.md's first program as a module of
// its own that requires xladdp through a replace directive (the module is
// not on the proxy), as the guide tells users to, with the build tags
// given; once per test process and tags.
func buildOwnModule(t *testing.T, tags string) string {
	return buildGuideProgram(t, guideProgram{doc: "own-module.md"}, tags)
}

// guideProgram names a Go program in docs/: the nth (from 0) `package
// main` block of doc, built in a module that also requires requires
// ("path version" lines) at the versions xladdp itself uses, with
// replaces.
type guideProgram struct {
	doc      string
	nth      int
	requires []string
	// replaces are further "path => dir" replace directives.
	replaces []string
}

// buildGuideProgram builds a guide's program as buildOwnModule does; once
// per test process, program and tags.
func buildGuideProgram(t *testing.T, g guideProgram, tags string) string {
	t.Helper()
	ownModules.Lock()
	defer ownModules.Unlock()
	key := fmt.Sprintf("%s %d %s %v", g.doc, g.nth, tags, g.replaces)
	if bin, ok := ownModules.bins[key]; ok {
		return bin
	}
	guide, err := os.ReadFile(filepath.Join("..", "docs", g.doc))
	require.NoError(t, err)
	programs := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindAllStringSubmatch(string(guide), -1)
	require.Greater(t, len(programs), g.nth, "docs/%s's program %d", g.doc, g.nth)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := exampletest.BuildDir(t, "own-module-")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(programs[g.nth][1]), 0o644))
	requires := append([]string{"github.com/xladdp/xladdp v0.0.0"}, g.requires...)
	goMod := "module example.com/yourprog\n\ngo 1.27\n\nrequire (\n\t" + strings.Join(requires, "\n\t") +
		"\n)\n\nreplace github.com/xladdp/xladdp => " + root + "\n"
	for _, r := range g.replaces {
		goMod += "replace " + r + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	bin := filepath.Join(dir, "yourprog")
	build := exec.Command("go", "build", "-mod=mod", "-tags", tags, "-o", bin, ".")
	build.Dir = dir
	// Everything it needs is in the module cache already (this module's
	// own dependencies): no network.
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	if ownModules.bins == nil {
		ownModules.bins = map[string]string{}
	}
	ownModules.bins[key] = bin
	return bin
}
