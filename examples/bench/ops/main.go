// Command ops times one op's forward and backward pass as a compiled step
// on one CPU device, for the per-op table `make bench` prints next to
// examples/bench/peers/ops_jax.py: each op at the MNIST CNN's shapes
// (batch 64), loss = sum(op(inputs) * a fixed cotangent), gradients with
// respect to every input. It prints one JSON line per op.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/examples/bench/internal/stats"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/xla"
)

// opCase is one benchmarked op: its inputs' shapes and the op.
type opCase struct {
	name   string
	inputs [][]int
	apply  func(in []*xla.Tensor) *xla.Tensor
}

// Cases are the MNIST CNN's layers at batch 64; ops_jax.py mirrors them.
var cases = []opCase{
	{"linear 9216->128", [][]int{{64, 9216}, {9216, 128}, {128}}, func(in []*xla.Tensor) *xla.Tensor {
		return in[0].MatMul(in[1]).Add(in[2])
	}},
	{"conv2d 32->64 3x3 on 26x26", [][]int{{64, 32, 26, 26}, {64, 32, 3, 3}}, func(in []*xla.Tensor) *xla.Tensor {
		return xla.Conv2d(in[0], in[1], xla.Conv2dOptions{})
	}},
	{"conv2d 1->32 3x3 on 28x28", [][]int{{64, 1, 28, 28}, {32, 1, 3, 3}}, func(in []*xla.Tensor) *xla.Tensor {
		return xla.Conv2d(in[0], in[1], xla.Conv2dOptions{})
	}},
	{"max_pool2d 2x2 on 64x24x24", [][]int{{64, 64, 24, 24}}, func(in []*xla.Tensor) *xla.Tensor {
		return xla.MaxPool2d(in[0], xla.Pool2dOptions{Kernel: [2]int{2, 2}})
	}},
	{"relu on 64x24x24", [][]int{{64, 64, 24, 24}}, func(in []*xla.Tensor) *xla.Tensor { return in[0].Relu() }},
	{"log_softmax over 10", [][]int{{64, 10}}, func(in []*xla.Tensor) *xla.Tensor { return in[0].LogSoftmax(1) }},
}

// Result is the JSON line printed per op.
type Result struct {
	Runner   string    `json:"runner"`
	Op       string    `json:"op"`
	CallMS   []float64 `json:"call_ms"`
	MedianMS float64   `json:"median_ms"`
}

func main() { cli.Exit("ops", run(context.Background(), os.Args[1:], os.Stdout)) }

func run(ctx context.Context, args []string, out io.Writer) error {
	f := pflag.NewFlagSet("ops", pflag.ContinueOnError)
	samples := f.Int("samples", 7, "timed samples; the figure is their median")
	calls := f.Int("calls", 20, "calls per sample")
	only := f.String("only", "", "run only ops whose name contains this")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *samples < 1 || *calls < 1 {
		return fmt.Errorf("--samples and --calls must be >= 1")
	}
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		return err
	}
	eng := xla.NewEngine(b)
	defer eng.Close()
	d := eng.Device(0)
	for _, c := range cases {
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		times, err := timeCase(ctx, d, c, *samples, *calls)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		res := Result{Runner: "xladdp compiled", Op: c.name, CallMS: times, MedianMS: stats.Median(times)}
		if err := json.NewEncoder(out).Encode(res); err != nil {
			return err
		}
	}
	return nil
}

// timeCase runs the op's forward and backward as a compiled step, two
// untimed calls first (trace, compile), and returns ms per call per sample.
func timeCase(ctx context.Context, d *xla.Device, c opCase, samples, calls int) ([]float64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([]*xla.Tensor, len(c.inputs))
	for i, dims := range c.inputs {
		t, err := xla.FromSlice(d, normal(rng, dims), dims...)
		if err != nil {
			return nil, err
		}
		if err := t.SetRequiresGrad(true); err != nil {
			return nil, err
		}
		inputs[i] = t
	}
	var cotangent *xla.Tensor
	step := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		for _, in := range inputs {
			in.ZeroGrad()
		}
		loss := c.apply(inputs).Mul(cotangent).Sum()
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		// The loss first: reading it waits for the whole program (the
		// gradients are its other outputs) without copying them.
		outs := []*xla.Tensor{loss}
		for _, in := range inputs {
			outs = append(outs, in.Grad())
		}
		return outs, nil
	})
	outShape := c.apply(inputs).Dims()
	ct, err := xla.FromSlice(d, normal(rng, outShape), outShape...)
	if err != nil {
		return nil, err
	}
	cotangent = ct
	if err := d.MarkStep(ctx); err != nil { // drop the shape probe
		return nil, err
	}
	call := func() error {
		outs, err := step.Run(ctx, d)
		if err != nil {
			return err
		}
		_, err = outs[0].Item(ctx)
		return err
	}
	for range 2 {
		if err := call(); err != nil {
			return nil, err
		}
	}
	var times []float64
	for range samples {
		start := time.Now()
		for range calls {
			if err := call(); err != nil {
				return nil, err
			}
		}
		times = append(times, float64(time.Since(start).Microseconds())/1000/float64(calls))
	}
	return times, nil
}

func normal(rng *rand.Rand, dims []int) []float32 {
	n := 1
	for _, d := range dims {
		n *= d
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}
