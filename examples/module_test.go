package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUsedFromAnotherModule builds docs/own-module.md's minimal program as a
// module of its own that requires xladdp through a replace directive (the
// module is not on the proxy), as the guide tells users to, and runs it
// spawned on 2 CPU devices.
func TestUsedFromAnotherModule(t *testing.T) {
	guide, err := os.ReadFile("../docs/own-module.md")
	require.NoError(t, err)
	section := string(guide)
	program := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, program, "docs/own-module.md's minimal program")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program[1]), 0o644))
	goMod := "module example.com/yourprog\n\ngo 1.24\n\nrequire github.com/xladdp/xladdp v0.0.0\n\nreplace github.com/xladdp/xladdp => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	bin := filepath.Join(dir, "yourprog")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	// Everything it needs is in the module cache already (this module's
	// own dependencies): no network.
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	run := exec.Command(bin, "--spawn", "--cpu-devices", "2")
	run.Env = append(os.Environ(), "XLADDP_DEVICE=", "PJRT_DEVICE=", "RANK=", "WORLD_SIZE=", "XLADDP_CACHE_DIR="+t.TempDir())
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `step 20: loss \d+\.\d{4}`, string(out))
}
