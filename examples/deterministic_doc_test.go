package examples

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// TestDeterministicGuideProgram: the program of docs/deterministic.md,
// written only from that guide and own-module.md and built as a module of
// its own, trains to one weights sha256 with --deterministic on 1 and 2
// spawned replicas; the flags the guide promises to refuse are refused,
// and own-module.md's plain program refuses --deterministic.
// TestLongDeterministicGuideProgramResumes runs the rest of the guide.
func TestDeterministicGuideProgram(t *testing.T) {
	exampletest.CleanEnv(t)
	bin := buildGuideProgram(t, guideProgram{doc: "deterministic.md"}, "")
	const epochs = "10"
	want := guideDigest(t, bin, "--spawn", "--cpu-devices", "1", "--deterministic", "--epochs", epochs)
	assert.Equal(t, want, guideDigest(t, bin, "--spawn", "--cpu-devices", "2", "--deterministic", "--epochs", epochs), "2 replicas")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--spawn", "--micro-shard", "4"}, "--micro-shard 4 without --deterministic"},
		{[]string{"--spawn", "--deterministic", "--micro-shard", "5"}, "does not divide the global batch of 24"},
	} {
		res := runToEnd(t, append([]string{bin}, tc.args...))
		assert.Equal(t, 1, res.code, "%v: %s", tc.args, res.out)
		assert.Contains(t, res.out, tc.want, "%v", tc.args)
	}
	// own-module.md's program wraps with a plain ddp.Wrap: the flag,
	// which every program on ddp.Main takes, is refused there, not
	// ignored.
	plain := runToEnd(t, []string{buildOwnModule(t, ""), "--spawn", "--deterministic", "--steps", "2", "--checkpoint-dir", t.TempDir()})
	assert.Equal(t, 1, plain.code, plain.out)
	assert.Contains(t, plain.out, "the job runs --deterministic, but this wrapper was made without it")
}

// guideDigest runs argv to a clean end and returns its weights line.
func guideDigest(t *testing.T, argv ...string) string {
	t.Helper()
	res := runToEnd(t, argv)
	require.Equal(t, 0, res.code, "%v: %s", argv, res.out)
	w := weightsLine(res.out)
	require.NotEmpty(t, w, res.out)
	return w
}

// TestLongDeterministicGuideProgramResumes: the guide's program gives the
// same digest on 3 ddprun ranks as on 1 spawned replica, and the plain
// mode another (it is not the mode's rounding); SIGTERMed mid-run on 2
// replicas it commits and exits 75, and the same command resumed on 3
// ranks ends with the same digest; after the end the same command has
// nothing left to train, and a plain run is refused the deterministic
// checkpoint.
func TestLongDeterministicGuideProgramResumes(t *testing.T) {
	exampletest.CleanEnv(t)
	ddprun := exampletest.Ddprun(t)
	bin := buildGuideProgram(t, guideProgram{doc: "deterministic.md"}, "")
	const epochs = "100" // 2,000 steps: long enough to stop inside
	want := guideDigest(t, bin, "--spawn", "--cpu-devices", "1", "--deterministic", "--epochs", epochs)
	assert.Equal(t, want, guideDigest(t, ddprun, "--nproc_per_node=3", bin, "--deterministic", "--epochs", epochs), "ddprun 3")
	assert.NotEqual(t, want, guideDigest(t, bin, "--spawn", "--cpu-devices", "2", "--epochs", epochs), "the plain mode")

	dir := t.TempDir()
	stopped := runAndTerminate(t, []string{bin, "--spawn", "--cpu-devices", "2", "--deterministic", "--epochs", epochs,
		"--checkpoint-dir", dir, "--checkpoint-every", "20"}, filepath.Join(dir, "step-000000000020.safetensors"))
	require.Equal(t, workerenv.ExitPreempted, stopped.code, stopped.out)
	again := runToEnd(t, []string{ddprun, "--nproc_per_node=3", bin, "--deterministic", "--epochs", epochs,
		"--checkpoint-dir", dir, "--checkpoint-every", "20"})
	require.Equal(t, 0, again.code, again.out)
	assert.Contains(t, again.out, "resumed from "+dir)
	assert.Equal(t, want, weightsLine(again.out), "stopped on 2 replicas, resumed on 3 ranks")
	after := runToEnd(t, []string{bin, "--spawn", "--deterministic", "--epochs", epochs, "--checkpoint-dir", dir})
	require.Equal(t, 0, after.code, after.out)
	assert.Contains(t, after.out, "at step 2000", "the last step was committed")
	assert.NotContains(t, after.out, "loss ", "nothing left to train")
	plain := runToEnd(t, []string{bin, "--spawn", "--epochs", "1", "--checkpoint-dir", dir})
	assert.Equal(t, 1, plain.code, plain.out)
	assert.Contains(t, plain.out, `this run has "plain"`)
}
