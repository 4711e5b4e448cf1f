package optim

import (
	"fmt"
	"maps"
	"slices"

	"github.com/xladdp/xladdp/xla/nn"
)

// Configured is a model whose checkpoints must match how it was built (a
// data-parallel wrapper's mode): its entries ride in every checkpoint's
// metadata, and a checkpoint that recorded other values is refused on
// load, since training on from it would give neither run's weights.
type Configured interface {
	CheckpointConfig() map[string]string
}

// ConfigMetadata returns meta (copied) with model's configuration
// entries, when it has any (Configured).
func ConfigMetadata(model nn.Module, meta map[string]string) map[string]string {
	out := maps.Clone(meta)
	if out == nil {
		out = map[string]string{}
	}
	if m, ok := model.(Configured); ok {
		maps.Copy(out, m.CheckpointConfig())
	}
	return out
}

// CheckConfig refuses a checkpoint (meta, read from path) that recorded
// another value of one of model's configuration entries. An entry the
// checkpoint lacks (one written before the entry existed) passes.
func CheckConfig(model nn.Module, meta map[string]string, path string) error {
	m, ok := model.(Configured)
	if !ok {
		return nil
	}
	want := m.CheckpointConfig()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if was, ok := meta[k]; ok && was != want[k] {
			return fmt.Errorf("optim: %s was written with %s %q, this run has %q: training on from it would give neither run's weights; "+
				"resume with the same settings, or move the checkpoint away to start afresh", path, k, was, want[k])
		}
	}
	return nil
}
