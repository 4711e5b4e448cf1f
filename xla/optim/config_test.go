package optim

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/xla/nn"
)

// configured is a model that records its mode in its checkpoints.
type configured struct {
	nn.Module
	mode string
}

func (c configured) CheckpointConfig() map[string]string {
	return map[string]string{"ddp.mode": c.mode}
}

// TestCheckpointConfig: a Configured model's entries ride in the metadata,
// and a checkpoint that recorded another value is refused naming both; a
// checkpoint without the entry, or a model that records none, passes.
func TestCheckpointConfig(t *testing.T) {
	det := configured{mode: "deterministic: global batch 64, micro-shard 16"}
	meta := ConfigMetadata(det, map[string]string{"gpt": "shape"})
	assert.Equal(t, map[string]string{"gpt": "shape", "ddp.mode": det.mode}, meta)
	for _, tc := range []struct {
		name  string
		model nn.Module
		meta  map[string]string
		want  string
	}{
		{"same", det, meta, ""},
		{"another cut", configured{mode: "deterministic: global batch 64, micro-shard 8"}, meta,
			`ck was written with ddp.mode "deterministic: global batch 64, micro-shard 16", this run has "deterministic: global batch 64, micro-shard 8"`},
		{"plain on a deterministic checkpoint", configured{mode: "plain"}, meta, `this run has "plain"`},
		{"deterministic on a plain checkpoint", det, map[string]string{"ddp.mode": "plain"}, `written with ddp.mode "plain"`},
		{"a checkpoint without the entry", det, map[string]string{}, ""},
		{"a model that records nothing", nn.NewSequential(), meta, ""},
	} {
		err := CheckConfig(tc.model, tc.meta, "ck")
		if tc.want == "" {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.name)
		}
	}
	assert.NotContains(t, ConfigMetadata(nn.NewSequential(), nil), "ddp.mode")
}
