package cmdline

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-steps", "3", "--checkpoint", "c.safetensors", "--resume", "--metrics", "--plot", "p.png", "--log-interval", "7"}, ""},
		{[]string{"--max-steps", "-1"}, "--max-steps=-1: cannot be negative"},
		{[]string{"--resume"}, "--resume needs --checkpoint FILE"},
		{[]string{"--log-interval", "x"}, `invalid argument "x"`},
		{[]string{"--plot", "p.jpg"}, "name a .png file"},
		{[]string{"--plot", "/nonexistent/p.png"}, "--plot /nonexistent/p.png: its directory: stat /nonexistent: no such file or directory"},
		{[]string{"--checkpoint", "/etc/hostname/c.safetensors"}, "/etc/hostname is not a directory"},
		{[]string{"--checkpoint", "/proc/c.safetensors"}, "cannot write in /proc"},
	} {
		fs, _ := FlagSet("example", io.Discard)
		var r Run
		r.AddFlags(fs, 20)
		err := Parse(fs, tc.args)
		if err == nil {
			err = r.Check()
		}
		if tc.want != "" {
			assert.ErrorContains(t, err, tc.want, "%v", tc.args)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, Run{MaxSteps: 3, LogInterval: 7, Checkpoint: "c.safetensors", Plot: "p.png", Resume: true, Metrics: true}, r)
	}
	fs, _ := FlagSet("example", io.Discard)
	var r Run
	r.AddFlags(fs, 20)
	require.NoError(t, Parse(fs, nil))
	assert.Equal(t, Run{LogInterval: 20}, r, "defaults")
}

// TestOnlyRankZeroChecksItsOutputs: the plot and checkpoint are written
// by rank 0; another rank (whose node may lack the directory) does not
// refuse them.
func TestOnlyRankZeroChecksItsOutputs(t *testing.T) {
	r := Run{Plot: "/nonexistent/p.png", Checkpoint: "/nonexistent/c.safetensors"}
	t.Setenv("RANK", "1")
	require.NoError(t, r.Check())
	t.Setenv("RANK", "0")
	require.ErrorContains(t, r.Check(), "/nonexistent")
	t.Setenv("RANK", "")
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	require.NoError(t, r.Check())
}
