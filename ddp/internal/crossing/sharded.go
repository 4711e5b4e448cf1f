package crossing

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// Flat is a run of parameters of one dtype laid end to end, padded with
// zeros to Padded elements (a multiple of the job's replica count) and
// cut into one equal shard per replica, in global replica order: what a
// sharded optimizer reduce-scatters and all-gathers.
type Flat struct {
	DType   xla.DType
	Members []Member // offsets in elements from the run's start
	Length  int      // elements of the parameters
	Padded  int
}

// Member is one parameter's place in its Flat, in elements.
type Member struct {
	Param, Offset, Length int
	Dims                  []int
}

// ShardLen is each replica's share of f's elements.
func (f *Flat) ShardLen(replicas int) int { return f.Padded / replicas }

// FlatGradients lays f's gradients end to end, zero-padded.
func FlatGradients(dev *xla.Device, params []nn.Named, f *Flat) *xla.Tensor {
	parts := make([]*xla.Tensor, 0, len(f.Members)+1)
	for _, m := range f.Members {
		parts = append(parts, params[m.Param].Tensor.Grad().Reshape(m.Length))
	}
	if f.Padded > f.Length {
		parts = append(parts, dev.Zeros(f.DType, f.Padded-f.Length))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return xla.Concat(0, parts...)
}

// ReduceScatter gives each local replica the mean of its shard of every
// run, recorded into the step's program.
func (InGraph) ReduceScatter(_ context.Context, dev *xla.Device, params []nn.Named, flats []*Flat) ([]*xla.Tensor, error) {
	_, count := dev.Replica()
	out := make([]*xla.Tensor, len(flats))
	for i, f := range flats {
		// Divided before the sum, as MeanGradients does.
		out[i] = xla.ReduceScatter(FlatGradients(dev, params, f).DivScalar(float64(count)), xla.ReduceSum, 0)
		if err := out[i].Err(); err != nil {
			return nil, fmt.Errorf("reduce-scattering bucket %d: %w", i, err)
		}
	}
	return out, nil
}

// AllGather sets every parameter from the local replicas' shards.
func (InGraph) AllGather(_ context.Context, _ *xla.Device, params []nn.Named, flats []*Flat, shards []*xla.Tensor) error {
	for i, f := range flats {
		whole := xla.AllGather(shards[i].Cast(f.DType), 0)
		if err := assignMembers(params, f, whole); err != nil {
			return err
		}
	}
	return nil
}

// CombineScalar all-reduces a scalar over the local replicas.
func (InGraph) CombineScalar(_ context.Context, dev *xla.Device, partial *xla.Tensor, op xla.ReduceOp) (*xla.Tensor, error) {
	if _, count := dev.Replica(); count > 1 {
		partial = xla.AllReduce(partial, op)
	}
	return partial, partial.Err()
}

// assignMembers sets each parameter of f to its piece of whole.
func assignMembers(params []nn.Named, f *Flat, whole *xla.Tensor) error {
	for _, m := range f.Members {
		p := params[m.Param]
		if err := p.Tensor.Assign(whole.Narrow(0, m.Offset, m.Length).Reshape(m.Dims...)); err != nil {
			return fmt.Errorf("gathering %s: %w", p.Name, err)
		}
	}
	return nil
}

// OwnShard is this replica's shard (n elements) of flat, a run every
// replica of the job holds alike: this process's block, then the local
// replica's piece of it. The local replicas run one program, so the piece
// is taken by a reduce-scatter rather than an offset of their own: their
// values are equal, so the largest is each one's own, exactly.
func OwnShard(dev *xla.Device, rank int, flat *xla.Tensor, n int) *xla.Tensor {
	_, local := dev.Replica()
	block := flat.Narrow(0, rank*local*n, local*n)
	if local > 1 {
		block = xla.ReduceScatter(block, xla.ReduceMax, 0)
	}
	return block
}
