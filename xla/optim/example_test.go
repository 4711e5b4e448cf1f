package optim_test

import (
	"context"
	"fmt"
	"log"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
)

// One SGD step on w² from w = 3: the gradient is 6, so w becomes
// 3 - 0.1·6 = 2.4.
func ExampleNewSGD() {
	ctx := context.Background()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU})
	if err != nil {
		log.Fatal(err)
	}
	eng := xla.NewEngine(b)
	defer eng.Close()
	w, err := xla.FromSlice(eng.Device(0), []float32{3}, 1)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.SetRequiresGrad(true); err != nil {
		log.Fatal(err)
	}
	opt, err := optim.NewSGD([]*xla.Tensor{w}, optim.SGDConfig{LR: 0.1})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Mul(w).Sum().Backward(); err != nil {
		log.Fatal(err)
	}
	if err := opt.Step(); err != nil {
		log.Fatal(err)
	}
	v, err := w.Item(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.2f\n", v)
	// Output: 2.40
}
