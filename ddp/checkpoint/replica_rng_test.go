package checkpoint_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// dropoutSpawn is ddptest.DropoutSpawn with single-file checkpoints.
func dropoutSpawn(t *testing.T, replicas int, load, save string, saveAt, steps int) ([]float32, error) {
	return ddptest.DropoutSpawn(t, ddptest.DropoutRun{Replicas: replicas, Load: load, Save: save, SaveAt: saveAt, Steps: steps})
}

// rewrite rewrites the checkpoint at path with edit applied to its
// tensors.
func rewrite(t *testing.T, path, to string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	f.Tensors = edit(f.Tensors)
	require.NoError(t, safetensors.WriteFile(to, f))
}

// TestCheckpointRestoresEveryReplicasRNG: two local replicas, seeded
// apart, draw different dropout masks; a checkpoint holds both random
// states, so a resume ends bit-identical to the uninterrupted run. With
// only replica 0's state (the table removed) both replicas would draw
// its masks, and the run would differ: the test sees that. A file of
// another replica count loads (each replica keeps its own seeding); a
// damaged table is refused.
func TestCheckpointRestoresEveryReplicasRNG(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "step3.safetensors")
	uninterrupted, err := dropoutSpawn(t, 2, "", ck, 3, 6)
	require.NoError(t, err)
	f, err := safetensors.ReadFile(ck)
	require.NoError(t, err)
	table, ok := f.Lookup("ddp.replica_rng")
	require.True(t, ok, "the file holds every replica's random state")
	assert.Equal(t, "U64", table.DType)
	assert.Equal(t, 2, table.Shape[0])
	assert.NotEqual(t, table.Data[:len(table.Data)/2], table.Data[len(table.Data)/2:], "the replicas' states differ")

	resumed, err := dropoutSpawn(t, 2, ck, "", 0, 6)
	require.NoError(t, err)
	assert.Equal(t, uninterrupted, resumed, "resumed bit for bit")

	onlyReplica0 := filepath.Join(dir, "only0.safetensors")
	rewrite(t, ck, onlyReplica0, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return slices.DeleteFunc(ts, func(t safetensors.Tensor) bool { return t.Name == "ddp.replica_rng" })
	})
	alike, err := dropoutSpawn(t, 2, onlyReplica0, "", 0, 6)
	require.NoError(t, err)
	assert.NotEqual(t, uninterrupted, alike, "with replica 0's state on both, the masks and the run differ")

	_, err = dropoutSpawn(t, 1, ck, "", 0, 6)
	assert.NoError(t, err, "another replica count resumes, each replica with its own seeding")

	for name, edit := range map[string]func(*safetensors.Tensor){
		"row size":  func(t *safetensors.Tensor) { t.Shape = []int{1, 2 * t.Shape[1]} },
		"dtype":     func(t *safetensors.Tensor) { t.DType = "I64" },
		"dimension": func(t *safetensors.Tensor) { t.Shape = []int{t.Shape[0] * t.Shape[1]} },
	} {
		bad := filepath.Join(dir, "bad-"+name+".safetensors")
		rewrite(t, ck, bad, func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == "ddp.replica_rng" {
					edit(&ts[i])
				}
			}
			return ts
		})
		_, err := dropoutSpawn(t, 2, bad, "", 0, 6)
		assert.ErrorContains(t, err, "ddp.replica_rng is ", fmt.Sprintf("a table with another %s is refused", name))
	}
}
