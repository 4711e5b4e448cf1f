package xla_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla"
)

// Train y = 2x on 2 CPU replicas with in-graph gradient all-reduce: the
// program compiles once and runs from cache for the remaining steps.
func ExampleEngine_RunReplicas() {
	os.Setenv(xla.EnvCacheDir, "off") // keep the example's compile count exact
	ctx := context.Background()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	eng := xla.NewEngine(b)
	xla.ResetMetrics()

	var first, last float64
	err = eng.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		w, err := xla.FromSlice(d, []float32{0}, 1, 1)
		if err != nil {
			return err
		}
		if err := w.SetRequiresGrad(true); err != nil {
			return err
		}
		// Each replica sees its own shard of the data.
		offset := float32(r.Index())
		x, err := xla.FromSlice(d, []float32{1 + offset, 2 + offset, 3 + offset}, 3, 1)
		if err != nil {
			return err
		}
		y, err := xla.FromSlice(d, []float32{2 + 2*offset, 4 + 2*offset, 6 + 2*offset}, 3, 1)
		if err != nil {
			return err
		}
		for step := range 50 {
			loss := x.MatMul(w).Sub(y).Square().Mean()
			if err := loss.Backward(); err != nil {
				return err
			}
			grad := xla.AllReduce(w.Grad(), xla.ReduceMean)
			if err := w.Assign(w.Sub(grad.MulScalar(0.05))); err != nil {
				return err
			}
			w.ZeroGrad()
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
			if r.Index() == 0 {
				v, err := loss.Item(ctx)
				if err != nil {
					return err
				}
				if step == 0 {
					first = v
				}
				last = v
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	m := xla.GetMetrics()
	fmt.Printf("loss fell below 1%% of its start: %v\n", last < first/100)
	fmt.Printf("compilations: %d, cache hits: %d\n", m.Compilations, m.CacheHits)
	// Output:
	// loss fell below 1% of its start: true
	// compilations: 1, cache hits: 49
}

// Train y = 2x with a compiled step: the Go function runs once, at the
// trace; the other 49 calls run its program on the current weights.
func ExampleCompile() {
	os.Setenv(xla.EnvCacheDir, "off")
	ctx := context.Background()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	d := xla.NewEngine(b).Device(0)
	w, err := xla.FromSlice(d, []float32{0}, 1, 1)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.SetRequiresGrad(true); err != nil {
		log.Fatal(err)
	}
	x, err := xla.FromSlice(d, []float32{1, 2, 3}, 3, 1)
	if err != nil {
		log.Fatal(err)
	}
	y, err := xla.FromSlice(d, []float32{2, 4, 6}, 3, 1)
	if err != nil {
		log.Fatal(err)
	}
	step := xla.Compile(func(args ...*xla.Tensor) ([]*xla.Tensor, error) {
		w.ZeroGrad()
		loss := args[0].MatMul(w).Sub(args[1]).Square().Mean()
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		return []*xla.Tensor{loss}, w.Assign(w.Sub(w.Grad().MulScalar(0.05)).Detach())
	})
	xla.ResetMetrics()
	for range 50 {
		if _, err := step.Run(ctx, d, x, y); err != nil {
			log.Fatal(err)
		}
	}
	v, err := w.Item(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("w = %.3f after %d trace(s)\n", v, xla.GetMetrics().StepTraces)
	// Output:
	// w = 2.000 after 1 trace(s)
}
