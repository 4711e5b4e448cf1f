// Command checkpoint measures what a checkpoint.Checkpointer costs the training
// step: a model with a 100 MB state (one 5120×5120 float32 layer and its
// bias, plain SGD) trains with a checkpoint every --every steps, written
// off the step, against the same run without checkpoints, lazily (a
// MarkStep per step) and as a compiled step (xla.Compile, which updates
// the state in place). It prints the median step of each, the time the
// saving steps and the steps after them take, and the whole run's ratio.
//
//	go run ./examples/bench/checkpoint --steps 200 --every 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	_ "github.com/xladdp/xladdp/targets" // every target, as every command
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func main() {
	steps := flag.Int("steps", 60, "measured steps per run")
	every := flag.Int("every", 10, "steps between checkpoints")
	width := flag.Int("width", 5120, "the layer's width (5120: 105 MB of parameters)")
	rounds := flag.Int("rounds", 3, "alternated runs with and without checkpoints, per mode")
	flag.Parse()
	if err := run(*steps, *every, *width, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint:", err)
		os.Exit(1)
	}
}

// window is how many steps from a saving step on count toward what a
// checkpoint cost: the background write overlaps the steps after it.
const window = 10

// runTimes are one run's step times (step i+1 at i).
type runTimes struct {
	steps []time.Duration
	// taking is how long Checkpointer.Step blocked on each saving step.
	taking []time.Duration
	total  time.Duration
}

// checkpointCost is, over the checkpoints of a run saving every every
// steps, the median time the saving step took and the median time lost
// per checkpoint: the window steps from the saving step on, less as many
// of the run's median step outside those windows.
func checkpointCost(t runTimes, every int) (saving, lost, base time.Duration) {
	var outside, savingSteps, losses []time.Duration
	inWindow := func(i int) bool { return (i+1)%every < window && i+1 >= every }
	for i, d := range t.steps {
		if !inWindow(i) {
			outside = append(outside, d)
		}
	}
	base = median(outside)
	for k := every - 1; k+window <= len(t.steps); k += every {
		savingSteps = append(savingSteps, t.steps[k])
		var sum time.Duration
		for _, d := range t.steps[k : k+window] {
			sum += d
		}
		losses = append(losses, sum-window*base)
	}
	return median(savingSteps), median(losses), base
}

func run(steps, every, width, rounds int) error {
	ctx := context.Background()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 1})
	if err != nil {
		return err
	}
	e := xla.NewEngine(b)
	defer e.Close()
	bn, err := newBench(ctx, e.Device(0), width, steps)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ckbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	state := int64(width*width+width) * 4
	fmt.Printf("state %.1f MB, %d steps per run, a checkpoint every %d, %d alternated runs each\n", float64(state)/1e6, steps, every, rounds)
	for _, mode := range []struct {
		name string
		step func() error
	}{{"lazy", bn.lazyStep}, {"compiled", bn.compiledStep}} {
		if err := bn.compare(mode.name, mode.step, dir, every, rounds); err != nil {
			return err
		}
	}
	return nil
}

// bench is the benchmark's model, its optimizer and batch, the training
// step compiled, and how many steps a run measures.
type bench struct {
	ctx      context.Context
	d        *xla.Device
	layer    *nn.Linear
	opt      *optim.SGD
	x        *xla.Tensor
	compiled *xla.CompiledStep
	steps    int
}

// newBench builds the layer of width×width on d, its optimizer and a
// batch of zeros, and compiles the training step.
func newBench(ctx context.Context, d *xla.Device, width, steps int) (*bench, error) {
	layer, err := nn.NewLinear(d, nn.NewRand(1), width, width, true)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewSGD(nn.Parameters(layer), optim.SGDConfig{LR: 1e-6})
	if err != nil {
		return nil, err
	}
	x, err := xla.FromSlice(d, make([]float32, 16*width), 16, width)
	if err != nil {
		return nil, err
	}
	bn := &bench{ctx: ctx, d: d, layer: layer, opt: opt, x: x, steps: steps}
	bn.compiled = xla.Compile(bn.train)
	return bn, nil
}

// train traces one training step.
func (bn *bench) train(...*xla.Tensor) ([]*xla.Tensor, error) {
	bn.opt.ZeroGrad()
	if err := bn.layer.Forward(bn.x).Square().Mean().Backward(); err != nil {
		return nil, err
	}
	return nil, bn.opt.Step()
}

// lazyStep traces a step and runs it with a MarkStep.
func (bn *bench) lazyStep() error {
	if _, err := bn.train(); err != nil {
		return err
	}
	return bn.d.MarkStep(bn.ctx)
}

// compiledStep runs the compiled step.
func (bn *bench) compiledStep() error {
	_, err := bn.compiled.Run(bn.ctx, bn.d)
	return err
}

// compare warms step up and prints rounds of a run without checkpoints
// against one with a checkpoint every every steps, each under dir.
func (bn *bench) compare(name string, step func() error, dir string, every, rounds int) error {
	for range 3 { // compile and warm up
		if err := step(); err != nil {
			return err
		}
	}
	for i := range rounds {
		p, err := bn.measure(step, dir+"/none", 0)
		if err != nil {
			return err
		}
		s, err := bn.measure(step, dir+"/every", every)
		if err != nil {
			return err
		}
		saving, lost, base := checkpointCost(s, every)
		fmt.Printf("%s run %d: median step %v without checkpoints, %v between them; saving step %v (Checkpointer.Step %v), lost per checkpoint %v over %d steps = %.1f%% of the %d steps between checkpoints; whole run %v without, %v with: %.3f×\n",
			name, i+1, median(p.steps), base, saving, median(s.taking), lost, window, 100*float64(lost)/float64(time.Duration(every)*base), every,
			p.total.Round(time.Millisecond), s.total.Round(time.Millisecond), float64(s.total)/float64(p.total))
	}
	return nil
}

// measure times a run of bn.steps steps with a checkpoint into dir every
// every steps (none at 0).
func (bn *bench) measure(step func() error, dir string, every int) (runTimes, error) {
	ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: every})
	if err != nil {
		return runTimes{}, err
	}
	var t runTimes
	start := time.Now()
	for i := 1; i <= bn.steps; i++ {
		s := time.Now()
		if err := step(); err != nil {
			return t, err
		}
		c := time.Now()
		if err := ck.Step(bn.ctx, optim.Checkpoint{Model: bn.layer, Optimizer: bn.opt, Step: i}); err != nil {
			return t, err
		}
		if every > 0 && i%every == 0 {
			t.taking = append(t.taking, time.Since(c))
		}
		t.steps = append(t.steps, time.Since(s))
	}
	err = ck.Close()
	t.total = time.Since(start)
	return t, err
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}
