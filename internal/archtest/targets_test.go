package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryCommandLinksEveryTarget: a binary that opens a device (it links
// package backend) also links the neuron target's bootstrap, so the Trn1
// user's `--device neuron` reaches the plugin instead of "import
// github.com/xladdp/xladdp/neuron in the program". The cpu and cuda targets
// live in package backend itself; the engine (xla) links no target, so
// each command does, through ddp or package targets.
func TestEveryCommandLinksEveryTarget(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "github.com/xladdp/xladdp/...").Output()
	require.NoError(t, err, "go list")
	commands := strings.Fields(string(out))
	for _, want := range []string{"cmd/xladevices", "examples/toy", "examples/mnist", "examples/cifar10",
		"examples/finetune", "examples/linear", "examples/gpt", "examples/collectives", "examples/devicecollectives"} {
		require.Contains(t, commands, "github.com/xladdp/xladdp/"+want, "go list found no such command")
	}
	for _, cmd := range commands {
		deps, err := exec.Command("go", "list", "-deps", cmd).Output()
		require.NoError(t, err, "go list -deps %s", cmd)
		pkgs := strings.Fields(string(deps))
		if !slices.Contains(pkgs, "github.com/xladdp/xladdp/backend") {
			continue // opens no device (ddprun)
		}
		assert.Contains(t, pkgs, "github.com/xladdp/xladdp/neuron", "%s opens a device but cannot open the neuron target", cmd)
	}
}
