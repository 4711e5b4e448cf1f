package zero

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/xladdp/xladdp/ddp/internal/crossing"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

// zeroBucket is a run of parameters of one group and one dtype, laid end
// to end and cut into one equal shard per replica of the job, padded with
// zeros at the end when its length does not divide. Where a bucket ends
// depends on the parameters and the bucket cap only, never on the world
// size: a checkpoint's buckets are the same at any world size, only their
// padding and cuts differ.
type zeroBucket struct {
	group int
	crossing.Flat
}

// masterDType is the dtype of b's master shard and optimizer state:
// float32 for bfloat16 parameters (fp32 master weights), else the
// parameters' own.
func (b *zeroBucket) masterDType() xla.DType { return xla.OpMathDType(b.DType) }

// planZeroBuckets lays params out group by group, in the module's order,
// starting a bucket when the dtype changes or the cap would be exceeded.
func planZeroBuckets(params []nn.Named, groupOf []int, groups, capBytes, replicas int) []*zeroBucket {
	var buckets []*zeroBucket
	for g := range groups {
		var open *zeroBucket
		for i, p := range params {
			if groupOf[i] != g {
				continue
			}
			t := p.Tensor
			n := t.Shape().Size()
			if open == nil || open.DType != t.DType() || (open.Length > 0 && (open.Length+n)*t.DType().Size() > capBytes) {
				open = &zeroBucket{group: g, Flat: crossing.Flat{DType: t.DType()}}
				buckets = append(buckets, open)
			}
			open.Members = append(open.Members, crossing.Member{Param: i, Offset: open.Length, Length: n, Dims: t.Dims()})
			open.Length += n
		}
	}
	for _, b := range buckets {
		b.Padded = (b.Length + replicas - 1) / replicas * replicas
	}
	return buckets
}

// groupsOf maps each parameter to the index of the group holding it:
// every parameter in exactly one group, no tensor outside the module.
func groupsOf(params []nn.Named, groups []optim.ParamGroup) ([]int, error) {
	index := make(map[*xla.Tensor]int, len(params))
	for i, p := range params {
		index[p.Tensor] = i
	}
	groupOf := make([]int, len(params))
	for i := range groupOf {
		groupOf[i] = -1
	}
	for gi, g := range groups {
		if g.WeightDecay < 0 || math.IsNaN(g.WeightDecay) || math.IsInf(g.WeightDecay, 0) {
			return nil, fmt.Errorf("parameter group %d: weight decay %g must be finite and >= 0", gi, g.WeightDecay)
		}
		for _, t := range g.Params {
			i, ok := index[t]
			if !ok {
				if t != nil && t.Shape().Size() == 0 {
					continue // an empty parameter has nothing to shard
				}
				return nil, fmt.Errorf("parameter group %d holds a tensor that is not a parameter of the wrapped module", gi)
			}
			if groupOf[i] >= 0 {
				return nil, fmt.Errorf("%s is in parameter groups %d and %d", params[i].Name, groupOf[i], gi)
			}
			groupOf[i] = gi
		}
	}
	for i, g := range groupOf {
		if g < 0 {
			return nil, fmt.Errorf("%s is in no parameter group: list every parameter of the module", params[i].Name)
		}
	}
	return groupOf, nil
}

// zeroLayoutText describes the sharded layout as every replica must see
// it: each parameter's name, dtype, shape and group, each group's weight
// decay, the bucket cap and the optimizer. Ranks compare its hash.
func zeroLayoutText(params []nn.Named, groupOf []int, groups []optim.ParamGroup, capBytes int, opt optim.Optimizer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "optimizer %s\nbucket cap %d bytes\n", optimizerDescription(opt), capBytes)
	for gi, g := range groups {
		fmt.Fprintf(&b, "group %d weight decay %g\n", gi, g.WeightDecay)
	}
	for i, p := range params {
		fmt.Fprintf(&b, "%s %s%v group %d\n", p.Name, p.Tensor.DType(), p.Tensor.Dims(), groupOf[i])
	}
	return b.String()
}

// optimizerDescription names an optimizer's kind and settings, sorted.
func optimizerDescription(opt optim.Optimizer) string {
	return fmt.Sprintf("%T %s", opt, optim.HyperparametersJSON(opt))
}

// shardBytes cuts replica's shard of bucket b out of the module's
// parameter values (the host bytes of each member, in b's dtype) and
// converts it to the master dtype.
func shardBytes(b *zeroBucket, values [][]byte, replica, replicas int) []byte {
	n := b.ShardLen(replicas)
	lo, hi := replica*n, (replica+1)*n
	size := b.DType.Size()
	out := make([]byte, n*size)
	for _, m := range b.Members {
		from, to := max(lo, m.Offset), min(hi, m.Offset+m.Length)
		if from >= to {
			continue
		}
		copy(out[(from-lo)*size:(to-lo)*size], values[m.Param][(from-m.Offset)*size:(to-m.Offset)*size])
	}
	if b.masterDType() == b.DType {
		return out
	}
	return widenBFloat16(out)
}

// widenBFloat16 converts bfloat16 bytes to float32 bytes exactly (a
// bfloat16 is the high half of a float32).
func widenBFloat16(in []byte) []byte {
	out := make([]byte, 2*len(in))
	for i := 0; i+1 < len(in); i += 2 {
		binary.LittleEndian.PutUint32(out[2*i:], uint32(binary.LittleEndian.Uint16(in[i:]))<<16)
	}
	return out
}
