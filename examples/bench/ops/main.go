// Command ops times the MNIST CNN's layers one by one as compiled steps on
// one CPU device, for the per-op table `make bench` prints next to
// examples/bench/peers/ops_jax.py and ops_torch.py: each op's forward
// (loss = sum(op(inputs) * cotangent)) and its forward and backward (the
// loss and the gradients of the inputs the model differentiates), at the
// seed's shapes and the batch --batch, and one Adadelta update of the
// model's parameters. It prints one JSON line per row. Run it pinned to a
// core (taskset -c 0) for the one-core table.
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
	_ "github.com/xladdp/xladdp/targets" // every target, as every command
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
)

// Result is the JSON line printed per row.
type Result struct {
	Runner   string    `json:"runner"`
	Op       string    `json:"op"`
	Pass     string    `json:"pass"` // "forward", "forward+backward" or "update"
	Batch    int       `json:"batch"`
	CallMS   []float64 `json:"call_ms"`
	MedianMS float64   `json:"median_ms"`
}

func main() { cli.Exit("ops", run(context.Background(), os.Args[1:], os.Stdout)) }

func run(ctx context.Context, args []string, out io.Writer) error {
	f := pflag.NewFlagSet("ops", pflag.ContinueOnError)
	samples := f.Int("samples", 7, "timed samples; the figure is their median")
	calls := f.Int("calls", 20, "calls per sample")
	batch := f.Int("batch", 64, "the batch size")
	only := f.String("only", "", "run only rows whose op name contains this")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *samples < 1 || *calls < 1 || *batch < 1 {
		return fmt.Errorf("--samples, --calls and --batch must be >= 1")
	}
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		return err
	}
	eng := xla.NewEngine(b)
	defer eng.Close()
	d := eng.Device(0)
	t := timer{samples: *samples, calls: *calls}
	emit := func(op, pass string, times []float64) error {
		return json.NewEncoder(out).Encode(Result{Runner: "xladdp compiled", Op: op, Pass: pass, Batch: *batch,
			CallMS: times, MedianMS: stats.Median(times)})
	}
	for _, c := range cases {
		if *only != "" && !strings.Contains(c.name, *only) {
			continue
		}
		for _, backward := range []bool{false, true} {
			times, err := t.timeCase(ctx, d, c, *batch, backward)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if err := emit(c.name, passName(backward), times); err != nil {
				return err
			}
		}
	}
	if *only == "" || strings.Contains(adadeltaName, *only) {
		times, err := t.timeAdadelta(ctx, d)
		if err != nil {
			return fmt.Errorf("%s: %w", adadeltaName, err)
		}
		return emit(adadeltaName, "update", times)
	}
	return nil
}

func passName(backward bool) string {
	if backward {
		return "forward+backward"
	}
	return "forward"
}

type timer struct{ samples, calls int }

// timeCase runs the case as a compiled step, two untimed calls first
// (trace, compile), and returns ms per call per sample. Each call reads the
// loss, which waits for the whole program.
func (t timer) timeCase(ctx context.Context, d *xla.Device, c opCase, batch int, backward bool) ([]float64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([]*xla.Tensor, len(c.inputs))
	for i, in := range c.inputs {
		dims := in.dims(batch)
		var err error
		if in.labels {
			inputs[i], err = xla.FromSlice(d, labels(rng, dims[0]), dims...)
		} else {
			inputs[i], err = xla.FromSlice(d, normal(rng, dims), dims...)
		}
		if err == nil && backward && in.grad {
			err = inputs[i].SetRequiresGrad(true)
		}
		if err != nil {
			return nil, err
		}
	}
	outShape := c.apply(inputs).Dims()
	cotangent, err := xla.FromSlice(d, normal(rng, outShape), outShape...)
	if err != nil {
		return nil, err
	}
	if err := d.MarkStep(ctx); err != nil { // drop the shape probe
		return nil, err
	}
	step := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		loss := c.apply(inputs).Mul(cotangent).Sum()
		outs := []*xla.Tensor{loss}
		if !backward {
			return outs, nil
		}
		for _, in := range inputs {
			in.ZeroGrad()
		}
		if err := loss.Backward(); err != nil {
			return nil, err
		}
		for _, in := range inputs {
			if in.RequiresGrad() {
				outs = append(outs, in.Grad())
			}
		}
		return outs, nil
	})
	return t.time(func() error { return runAndRead(ctx, d, step) })
}

// timeAdadelta times one optimizer update of the CNN's parameters, the
// gradients fixed, the parameters and state updated in place.
func (t timer) timeAdadelta(ctx context.Context, d *xla.Device) ([]float64, error) {
	rng := rand.New(rand.NewPCG(3, 4))
	params := make([]*xla.Tensor, len(cnnParamDims))
	for i, dims := range cnnParamDims {
		p, err := xla.FromSlice(d, normal(rng, dims), dims...)
		if err != nil {
			return nil, err
		}
		g, err := xla.FromSlice(d, normal(rng, dims), dims...)
		if err == nil {
			err = p.SetRequiresGrad(true)
		}
		if err == nil {
			err = p.SetGrad(g)
		}
		if err != nil {
			return nil, err
		}
		params[i] = p
	}
	opt, err := optim.NewAdadelta(params, optim.AdadeltaConfig{LR: 1})
	if err != nil {
		return nil, err
	}
	step := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		if err := opt.Step(); err != nil {
			return nil, err
		}
		return []*xla.Tensor{params[len(params)-1].Sum()}, nil
	})
	return t.time(func() error { return runAndRead(ctx, d, step) })
}

// runAndRead runs step and reads its first output, which waits for the
// whole program.
func runAndRead(ctx context.Context, d *xla.Device, step *xla.CompiledStep) error {
	outs, err := step.Run(ctx, d)
	if err != nil {
		return err
	}
	_, err = outs[0].Item(ctx)
	return err
}

func (t timer) time(call func() error) ([]float64, error) {
	for range 2 {
		if err := call(); err != nil {
			return nil, err
		}
	}
	var times []float64
	for range t.samples {
		start := time.Now()
		for range t.calls {
			if err := call(); err != nil {
				return nil, err
			}
		}
		times = append(times, float64(time.Since(start).Microseconds())/1000/float64(t.calls))
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

func labels(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(10))
	}
	return out
}
