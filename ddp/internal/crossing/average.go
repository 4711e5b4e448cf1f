package crossing

import (
	"fmt"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// divideAndSumLocally replaces each gradient by its sum over the local
// replicas (local of them, in-graph) after dividing it by the job's
// replica count (replicas). Dividing first, as torch's DDP does, sums the
// same terms on every path (in-graph, host, sharded or not), and leaves
// the compiler no product with the optimizer's learning rate to
// reassociate: the one place plain and sharded updates could round apart.
func divideAndSumLocally(params []nn.Named, replicas, local int) error {
	for _, p := range params {
		g := p.Tensor.Grad().DivScalar(float64(replicas))
		if local > 1 {
			g = xla.AllReduce(g, xla.ReduceSum)
		}
		if err := p.Tensor.SetGrad(g); err != nil {
			return fmt.Errorf("averaging the gradient of %s: %w", p.Name, err)
		}
	}
	return nil
}
