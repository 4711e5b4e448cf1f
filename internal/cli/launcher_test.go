package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMisplacedLauncherOption(t *testing.T) {
	defined := func(name string) bool { return name == "epochs" || name == "compile_only" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--epochs", "3"}, ""},
		{[]string{"--nproc_per_node=2"}, "--nproc_per_node=2 is ddprun's (torchrun's) option, given after the program"},
		{[]string{"--epochs=1", "--nproc-per-node", "2"}, "--nproc-per-node is ddprun's"},
		{[]string{"--compile_only"}, ""}, // the program's own flag of that name
		{[]string{"--", "--nnodes=2"}, ""},
		{[]string{"-nnodes"}, ""},
	} {
		err := MisplacedLauncherOption(tc.args, defined)
		if tc.want == "" {
			assert.NoError(t, err, "%v", tc.args)
			continue
		}
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
		assert.ErrorContains(t, err, "(ddprun ")
	}
}
