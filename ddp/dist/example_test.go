package dist_test

import (
	"fmt"

	"github.com/xladdp/xladdp/ddp/dist"
)

// The reduce ops name themselves as torch.distributed does; xla's
// in-graph AllReduce takes the same type.
func ExampleReduceOp() {
	fmt.Println(dist.Sum, dist.Avg, dist.Max)
	// Output: SUM AVG MAX
}
