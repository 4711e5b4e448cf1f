package cli_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/internal/workerenv"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantCode   int
		wantStderr string
	}{
		{"success", nil, 0, ""},
		{"help", pflag.ErrHelp, 0, ""},
		{"wrapped help", fmt.Errorf("parsing: %w", pflag.ErrHelp), 0, ""},
		{"failure", errors.New("--epochs=0: must be positive"), 1, "prog: --epochs=0: must be positive\n"},
		{"preempted", fmt.Errorf("rank 1: %w", workerenv.ErrPreempted), workerenv.ExitPreempted,
			"prog: rank 1: " + workerenv.ErrPreempted.Error() + "\n"},
		{"every replica preempted", errors.Join(fmt.Errorf("rank 0: %w", workerenv.ErrPreempted), workerenv.ErrPreempted), workerenv.ExitPreempted,
			"prog: rank 0: " + workerenv.ErrPreempted.Error() + "\n" + workerenv.ErrPreempted.Error() + "\n"},
		{"preempted beside another failure", errors.Join(errors.New("disk full"), workerenv.ErrPreempted), 1,
			"prog: disk full\n" + workerenv.ErrPreempted.Error() + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, tt.wantCode, cli.ExitCode(&stderr, "prog", tt.err))
			assert.Equal(t, tt.wantStderr, stderr.String())
		})
	}
}

// TestEveryCommandHelp builds every command of the module and runs it with
// --help and -h: usage on the output, exit status 0.
func TestEveryCommandHelp(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	commands := []struct{ pkg, usageMentions string }{
		{"./cmd/xladevices", "--cpu-devices"},
		{"./examples/devicecollectives", "--devices"},
		{"./examples/mnist", "--spawn"},
		{"./examples/toy", "-spawn"},
		{"./examples/collectives", "--init-method"},
		{"./examples/linear", "--batch-size"},
		{"./examples/cifar10", "--no-ddp"},
		{"./examples/finetune", "--pretrained"},
		{"./examples/bench/allreduce", "--procs"},
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator))
	for _, c := range commands {
		build.Args = append(build.Args, c.pkg)
	}
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	for _, c := range commands {
		t.Run(c.pkg, func(t *testing.T) {
			exe := filepath.Join(bin, filepath.Base(c.pkg))
			for _, flag := range []string{"--help", "-h"} {
				cmd := exec.Command(exe, flag)
				cmd.Env = append(os.Environ(), "XLADDP_DEVICE=cpu")
				out, err := cmd.CombinedOutput()
				assert.NoError(t, err, "%s %s exit status; output:\n%s", c.pkg, flag, out)
				assert.Contains(t, string(out), c.usageMentions, "%s %s prints the usage", c.pkg, flag)
				assert.NotContains(t, string(out), "help requested")
			}
		})
	}
}
