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
	d := e.Device(0)
	layer, err := nn.NewLinear(d, nn.NewRand(1), width, width, true)
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(nn.Parameters(layer), optim.SGDConfig{LR: 1e-6})
	if err != nil {
		return err
	}
	x, err := xla.FromSlice(d, make([]float32, 16*width), 16, width)
	if err != nil {
		return err
	}
	train := func(...*xla.Tensor) ([]*xla.Tensor, error) {
		opt.ZeroGrad()
		if err := layer.Forward(x).Square().Mean().Backward(); err != nil {
			return nil, err
		}
		return nil, opt.Step()
	}
	compiled := xla.Compile(train)
	var step func() error
	lazyStep := func() error {
		if _, err := train(); err != nil {
			return err
		}
		return d.MarkStep(ctx)
	}
	compiledStep := func() error {
		_, err := compiled.Run(ctx, d)
		return err
	}
	measure := func(dir string, every int) (runTimes, error) {
		ck, err := checkpoint.New(checkpoint.Options{Dir: dir, Every: every})
		if err != nil {
			return runTimes{}, err
		}
		var t runTimes
		start := time.Now()
		for i := 1; i <= steps; i++ {
			s := time.Now()
			if err := step(); err != nil {
				return t, err
			}
			c := time.Now()
			if err := ck.Step(ctx, optim.Checkpoint{Model: layer, Optimizer: opt, Step: i}); err != nil {
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
	}{{"lazy", lazyStep}, {"compiled", compiledStep}} {
		step = mode.step
		for range 3 { // compile and warm up
			if err := step(); err != nil {
				return err
			}
		}
		for i := range rounds {
			p, err := measure(dir+"/none", 0)
			if err != nil {
				return err
			}
			s, err := measure(dir+"/every", every)
			if err != nil {
				return err
			}
			saving, lost, base := checkpointCost(s, every)
			fmt.Printf("%s run %d: median step %v without checkpoints, %v between them; saving step %v (Checkpointer.Step %v), lost per checkpoint %v over %d steps = %.1f%% of the %d steps between checkpoints; whole run %v without, %v with: %.3f×\n",
				mode.name, i+1, median(p.steps), base, saving, median(s.taking), lost, window, 100*float64(lost)/float64(time.Duration(every)*base), every,
				p.total.Round(time.Millisecond), s.total.Round(time.Millisecond), float64(s.total)/float64(p.total))
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}
