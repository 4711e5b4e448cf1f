package cmdline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
)

func TestRunFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-steps", "3", "--checkpoint", "c.safetensors", "--resume", "--metrics", "--plot", "p.png", "--log-interval", "7"}, ""},
		{[]string{"--max-steps", "-1"}, "--max-steps=-1: cannot be negative"},
		{[]string{"--resume"}, "--resume needs --checkpoint FILE"},
		{[]string{"--resume", "--checkpoint", "c.safetensors", "--checkpoint-dir", "ck"}, "the latter resumes by itself"},
		{[]string{"--log-interval", "x"}, `invalid argument "x"`},
		{[]string{"--plot", "p.jpg"}, "name a .png file"},
		{[]string{"--plot", "/nonexistent/p.png"}, "--plot /nonexistent/p.png: its directory: stat /nonexistent: no such file or directory"},
		{[]string{"--checkpoint", "/etc/hostname/c.safetensors"}, "/etc/hostname is not a directory"},
		{[]string{"--checkpoint", "/proc/c.safetensors"}, "cannot write in /proc"},
	} {
		fs, launch := FlagSet("example", io.Discard)
		var r Run
		r.AddFlags(fs, 20)
		err := Parse(fs, tc.args)
		if err == nil {
			err = r.Check(*launch)
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
	require.NoError(t, r.Check(ddp.Options{}))
	t.Setenv("RANK", "0")
	require.ErrorContains(t, r.Check(ddp.Options{}), "/nonexistent")
	t.Setenv("RANK", "")
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	require.NoError(t, r.Check(ddp.Options{}))
}

// ddp.Run's flags as every example takes them: the device target and the
// group's transport are parsed apart, and bad values fail at parse time.
func TestLaunchFlags(t *testing.T) {
	fs, o := FlagSet("example", io.Discard)
	require.NoError(t, Parse(fs, []string{"--spawn", "--device", "GPU", "--backend", " MPI ", "--cpu-devices", "3",
		"--init-method", "tcp://10.0.0.1:29500"}))
	assert.True(t, o.Spawn)
	assert.Equal(t, "cuda", string(o.Device.Target))
	assert.Equal(t, "mpi", o.Transport)
	assert.Equal(t, 3, o.CPUDevices)
	assert.Equal(t, "tcp://10.0.0.1:29500", o.InitMethod)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "nccl"}, `backend "nccl": want tcp (the default) or mpi`},
		{[]string{"--device", "tpu"}, `unknown device target "tpu"`},
		{[]string{"--cpu-devices", "0"}, "want a count from 1 to"},
		{[]string{"--cpu-devices", "99999999999999999999"}, "want a count from 1 to"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		fs, _ := FlagSet("example", io.Discard)
		assert.ErrorContains(t, Parse(fs, tc.args), tc.want, "%q", tc.args)
	}
}

// TestCheckpointKind: --zero's checkpoint is a directory and a plain one
// a file; an existing one of the other kind is refused before training,
// a missing one is left to the first save.
func TestCheckpointKind(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain.safetensors")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	missing := filepath.Join(dir, "new")
	for _, c := range []struct {
		path    string
		sharded bool
		want    string
	}{
		{file, true, "is a file, a checkpoint saved without --zero"},
		{dir, false, "is a directory, as --zero saves them"},
		{file, false, ""},
		{dir, true, ""},
		{missing, true, ""},
		{missing, false, ""},
		{"", true, ""},
	} {
		err := Run{Checkpoint: c.path}.CheckCheckpointKind(c.sharded)
		if c.want == "" {
			assert.NoError(t, err, "%s sharded=%v", c.path, c.sharded)
		} else {
			assert.ErrorContains(t, err, c.want, "%s sharded=%v", c.path, c.sharded)
		}
	}
}

// TestPerReplicaSaysWhenItRounds: a global batch that does not divide is
// rounded down to a multiple of the parts and rank 0 says so; one that
// divides, another rank, or a share of zero (the caller refuses it) says
// nothing.
func TestPerReplicaSaysWhenItRounds(t *testing.T) {
	tests := []struct {
		global, parts int
		rank0         bool
		want          int
		note          string
	}{
		{64, 6, true, 10, "note: --batch-size 64 does not divide over 6 replicas: each takes 10, a global batch of 60\n"},
		{64, 6, false, 10, ""},
		{64, 4, true, 16, ""},
		{3, 4, true, 0, ""},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		assert.Equal(t, tt.want, PerReplica(&out, tt.rank0, tt.global, tt.parts, fmt.Sprintf("%d replicas", tt.parts)))
		assert.Equal(t, tt.note, out.String(), "%+v", tt)
	}
}
