package cmdline

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeterministicCheckpointsKeepTheirCut: a --deterministic run's
// checkpoints carry its cut of the global batch; resuming one with
// another cut is refused, saying both, while a checkpoint of a run that
// was not deterministic, or a run that is not, goes on.
func TestDeterministicCheckpointsKeepTheirCut(t *testing.T) {
	on := Determinism{On: true, MicroShard: 16}
	meta := on.Mark(map[string]string{"gpt": "shape"}, 64)
	assert.Equal(t, "shape", meta["gpt"])
	require.NoError(t, on.CheckResumed(meta, 64, "ck"))
	err := Determinism{On: true, MicroShard: 8}.CheckResumed(meta, 64, "--checkpoint-dir ck")
	assert.ErrorContains(t, err, "--checkpoint-dir ck was written by a --deterministic run with --batch-size 64 --micro-shard 16, this one has --batch-size 64 --micro-shard 8")
	assert.ErrorContains(t, on.CheckResumed(meta, 32, "ck"), "--batch-size 32 --micro-shard 16")
	assert.NoError(t, on.CheckResumed(map[string]string{}, 64, "ck"), "a checkpoint of a run that was not deterministic")
	assert.NoError(t, Determinism{}.CheckResumed(meta, 32, "ck"), "a run that is not deterministic")
	off := Determinism{}.Mark(meta, 64)
	assert.NotContains(t, off, metaDeterministic, "a run that is not deterministic drops the mark")
	assert.Contains(t, meta, metaDeterministic, "Mark copies")

	assert.NoError(t, Determinism{}.Check(10))
	assert.ErrorContains(t, Determinism{On: true, MicroShard: 3}.Check(10), "--micro-shard 3, --batch-size 10")
}
