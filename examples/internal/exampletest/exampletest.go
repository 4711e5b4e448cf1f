// Package exampletest runs an example's main from its test binary and
// builds the ddprun those tests launch it under; it preempts, kills and
// resumes an example's job at moments that follow the machine's speed
// (Job, Marks), checks the samples an epoch used (--sample-log), and
// makes hosts of network namespaces. It knows the examples' shared
// flags, not their models.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/internal/testtmp"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/neuron/trn"
	"github.com/xladdp/xladdp/xla"
)

// ArgsEnv carries the example's command line to a re-executed test binary.
const ArgsEnv = "XLADDP_EXAMPLE_ARGS"

// childEnv marks the test binary re-executed as the example itself.
const childEnv = "XLADDP_EXAMPLE_CHILD"

// Main is an example's TestMain: in a child (Command) it runs the
// example's main with $XLADDP_EXAMPLE_ARGS, else the tests, and removes
// the commands Build built.
func Main(m *testing.M, name string, main func()) {
	if name != "" && os.Getenv(childEnv) == name {
		os.Args = append([]string{name}, strings.Fields(os.Getenv(ArgsEnv))...)
		main()
		os.Exit(0)
	}
	code := testtmp.Run(m)
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// sharedCache is the compiled-program cache the tests of one test
// process share (under the build directory, which Main removes): they
// compile the same example's programs, and compiling is most of make
// test's time. ColdCache gives a test its own.
func sharedCache(t *testing.T) string {
	built.Lock()
	defer built.Unlock()
	buildDir(t)
	return filepath.Join(built.dir, "xla-cache")
}

// ColdCache gives the test a compiled-program cache of its own, empty,
// for a test that counts compilations.
func ColdCache(t *testing.T) { t.Setenv(xla.EnvCacheDir, t.TempDir()) }

// built holds the commands Build made, once per test process: linking a
// command costs seconds, and many tests start ddprun.
var built struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// BuildDir is a directory of its own under the one Build builds into,
// for what a test builds once per test process (Main removes it).
func BuildDir(t testing.TB, pattern string) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	buildDir(t)
	dir, err := os.MkdirTemp(built.dir, pattern)
	require.NoError(t, err)
	return dir
}

// buildDir makes the build directory on first use; built is locked.
func buildDir(t testing.TB) {
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "xladdp-commands-")
		require.NoError(t, err)
		built.dir, built.paths = dir, map[string]string{}
	}
}

// Build builds the commands of pkgs (import paths) once per test process
// (into a directory Main removes) and returns their paths by package.
func Build(t testing.TB, pkgs ...string) map[string]string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	buildDir(t)
	var missing []string
	for _, p := range pkgs {
		if _, ok := built.paths[p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		out, err := exec.Command("go", append([]string{"build", "-o", built.dir + string(filepath.Separator)}, missing...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, p := range missing {
			built.paths[p] = filepath.Join(built.dir, filepath.Base(p))
		}
	}
	paths := map[string]string{}
	for _, p := range pkgs {
		paths[p] = built.paths[p]
	}
	return paths
}

// Env is what makes the test binary run as example name with args.
func Env(name string, args ...string) []string {
	return []string{childEnv + "=" + name, ArgsEnv + "=" + strings.Join(args, " ")}
}

// Self is the command that runs the test binary as the example (with Env).
func Self() []string { return []string{os.Args[0], "-test.run=^$"} }

// DdprunPackage is ddprun's import path.
const DdprunPackage = "github.com/xladdp/xladdp/cmd/ddprun"

// Ddprun builds ddprun (once per test process) and returns its path.
func Ddprun(t *testing.T) string {
	t.Helper()
	return Build(t, DdprunPackage)[DdprunPackage]
}

// Mpirun returns Open MPI's mpirun, or skips the test where it is missing:
// make deps installs it as root (as in CI) and, without root, prints the
// command that does.
func Mpirun(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install Debian's openmpi-bin (make deps does, as root)")
	}
	return path
}

// CleanEnv gives the test the test process's shared compile cache and
// clears what would pick another target, device count or launcher than
// the test's own.
func CleanEnv(t *testing.T) {
	t.Helper()
	t.Setenv(xla.EnvCacheDir, sharedCache(t))
	for _, env := range append([]string{backend.EnvDevice, backend.EnvPJRTDevice, backend.EnvCPUDevices,
		backend.EnvTorchXLACPUDevices, trn.EnvNumDevices, trn.EnvCoreNumDevices}, workerenv.Names()...) {
		t.Setenv(env, "")
	}
}
