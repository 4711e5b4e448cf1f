package cmdline

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla/nn"
)

// Determinism is --deterministic and --micro-shard: weights that depend
// on the data, the seed, the global batch and the micro-shard size only
// (ddp.Deterministic), whatever the replicas, launch or restarts.
type Determinism struct {
	On         bool
	MicroShard int
}

// AddFlags adds --deterministic and --micro-shard (default microShard).
func (d *Determinism) AddFlags(fs *pflag.FlagSet, microShard int) {
	fs.BoolVar(&d.On, "deterministic", false, "the same trained weights at any world size, launch, transport and restart "+
		"(the global batch is cut into --micro-shard samples each, summed in one fixed order; --batch-size is the global batch)")
	fs.IntVar(&d.MicroShard, "micro-shard", microShard, "with --deterministic, the samples of one micro-shard: it must divide "+
		"--batch-size, and the replicas can be at most --batch-size / --micro-shard")
}

// WrapOptions is ddp.Wrap's option for the flags, none without
// --deterministic. The flag must also set the launch's
// Device.Deterministic, so the backend compiles for it.
func (d Determinism) WrapOptions(globalBatch int, seed uint64) []ddp.WrapOption {
	if !d.On {
		return nil
	}
	return []ddp.WrapOption{ddp.Deterministic(globalBatch, d.MicroShard, seed)}
}

// WeightsDigest is the sha256 of module's parameters, then its buffers
// (BatchNorm's running statistics): each one's name, dtype, shape and
// bytes, in order. Two runs trained alike print the same.
func WeightsDigest(ctx context.Context, module nn.Module) (string, error) {
	h := sha256.New()
	for _, p := range append(nn.NamedParameters(module), nn.NamedBuffers(module)...) {
		t := p.Tensor
		fmt.Fprintf(h, "%s %s %v\n", p.Name, t.DType(), t.Dims())
		b := make([]byte, t.Shape().Memory())
		if err := t.CopyBytesTo(ctx, b); err != nil {
			return "", fmt.Errorf("reading %s for the weights' digest: %w", p.Name, err)
		}
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

// metaDeterministic is the metadata a --deterministic run's checkpoints
// carry: its global batch and micro-shard size.
const metaDeterministic = "examples.deterministic"

// Mark returns meta (copied) with the flags' cut of the global batch, or
// without one when --deterministic is off.
func (d Determinism) Mark(meta map[string]string, globalBatch int) map[string]string {
	out := maps.Clone(meta)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, metaDeterministic)
	if d.On {
		out[metaDeterministic] = d.cut(globalBatch)
	}
	return out
}

func (d Determinism) cut(globalBatch int) string {
	return fmt.Sprintf("--batch-size %d --micro-shard %d", globalBatch, d.MicroShard)
}

// CheckResumed refuses to go on deterministically from a checkpoint a
// deterministic run with another cut wrote (meta is the checkpoint's):
// its weights would be neither run's. from names the checkpoint.
func (d Determinism) CheckResumed(meta map[string]string, globalBatch int, from string) error {
	was, ok := meta[metaDeterministic]
	if !d.On || !ok || was == d.cut(globalBatch) {
		return nil
	}
	return fmt.Errorf("%s was written by a --deterministic run with %s, this one has %s: its weights would be neither run's; "+
		"resume with the same flags, or move the checkpoint away to start afresh", from, was, d.cut(globalBatch))
}

// Check refuses a micro-shard that cannot cut --batch-size.
func (d Determinism) Check(globalBatch int) error {
	if !d.On {
		return nil
	}
	if _, err := ddp.NewMicroShards(globalBatch, d.MicroShard); err != nil {
		return fmt.Errorf("--deterministic: --micro-shard %d, --batch-size %d: %w", d.MicroShard, globalBatch, err)
	}
	return nil
}
