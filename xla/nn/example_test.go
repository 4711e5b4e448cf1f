package nn_test

import (
	"context"
	"fmt"
	"log"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// A Linear layer maps [batch, in] to [batch, out]; its parameters carry
// torch's state-dict names.
func ExampleNewLinear() {
	ctx := context.Background()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU})
	if err != nil {
		log.Fatal(err)
	}
	eng := xla.NewEngine(b)
	defer eng.Close()
	d := eng.Device(0)
	layer, err := nn.NewLinear(d, nn.NewRand(1), 4, 3, true)
	if err != nil {
		log.Fatal(err)
	}
	x, err := xla.FromSlice(d, make([]float32, 2*4), 2, 4)
	if err != nil {
		log.Fatal(err)
	}
	y := layer.Forward(x)
	if err := d.MarkStep(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(y.Dims())
	for _, p := range nn.NamedParameters(layer) {
		fmt.Println(p.Name, p.Tensor.Dims())
	}
	// Output:
	// [2 3]
	// weight [3 4]
	// bias [3]
}
