package cmdline

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

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

// WeightsDigest is the sha256 of module's parameters: each one's name,
// dtype, shape and bytes, in order. Two runs trained alike print the
// same.
func WeightsDigest(ctx context.Context, module nn.Module) (string, error) {
	h := sha256.New()
	for _, p := range nn.NamedParameters(module) {
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
