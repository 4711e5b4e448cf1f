// Package exampletest runs an example's main from its test binary and
// builds the ddprun those tests launch it under.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/xla"
)

// ArgsEnv carries the example's command line to a re-executed test binary.
const ArgsEnv = "XLADDP_EXAMPLE_ARGS"

// childEnv marks the test binary re-executed as the example itself.
const childEnv = "XLADDP_EXAMPLE_CHILD"

// Main is an example's TestMain: in a child (Command) it runs the
// example's main with $XLADDP_EXAMPLE_ARGS, else the tests.
func Main(m *testing.M, name string, main func()) {
	if os.Getenv(childEnv) == name {
		os.Args = append([]string{name}, strings.Fields(os.Getenv(ArgsEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Env is what makes the test binary run as example name with args.
func Env(name string, args ...string) []string {
	return []string{childEnv + "=" + name, ArgsEnv + "=" + strings.Join(args, " ")}
}

// Self is the command that runs the test binary as the example (with Env).
func Self() []string { return []string{os.Args[0], "-test.run=^$"} }

// Ddprun builds ddprun for the test and returns its path.
func Ddprun(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ddprun")
	out, err := exec.Command("go", "build", "-o", path, "github.com/xladdp/xladdp/ddp/cmd/ddprun").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return path
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

// CleanEnv gives the test its own compile cache and clears what would
// pick another target, device count or launcher than the test's own.
func CleanEnv(t *testing.T) {
	t.Helper()
	t.Setenv(xla.EnvCacheDir, t.TempDir())
	for _, env := range []string{"XLADDP_DEVICE", "PJRT_DEVICE", "XLADDP_CPU_DEVICES", "CPU_NUM_DEVICES", "NEURON_NUM_DEVICES",
		"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "XLADDP_BACKEND"} {
		t.Setenv(env, "")
	}
}
