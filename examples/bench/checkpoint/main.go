// Command checkpoint measures what a ddp.Checkpointer costs the training
// step: a model with a 100 MB state (one 5120×5120 float32 layer and its
// bias, plain SGD) trains with a checkpoint every --every steps, written
// off the step, against the same run without checkpoints. It prints the
// median step of each, the time the saving steps block for, and the
// whole run's ratio.
//
//	go run ./examples/bench/checkpoint --steps 60 --every 10
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func main() {
	steps := flag.Int("steps", 60, "measured steps per run")
	every := flag.Int("every", 10, "steps between checkpoints")
	width := flag.Int("width", 5120, "the layer's width (5120: 105 MB of parameters)")
	flag.Parse()
	if err := run(*steps, *every, *width); err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint:", err)
		os.Exit(1)
	}
}

// runTimes are one run's step times, and those of its saving steps.
type runTimes struct {
	steps, saving []time.Duration
	total         time.Duration
}

func run(steps, every, width int) error {
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
	step := func() error {
		opt.ZeroGrad()
		return optim.BackwardStep(ctx, layer.Forward(x).Square().Mean(), opt)
	}
	measure := func(dir string, every int) (runTimes, error) {
		ck, err := ddp.NewCheckpointer(ddp.CheckpointerOptions{Dir: dir, Every: every})
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
			if err := d.MarkStep(ctx); err != nil {
				return t, err
			}
			if err := ck.Step(ctx, optim.Checkpoint{Model: layer, Optimizer: opt, Step: i}); err != nil {
				return t, err
			}
			took := time.Since(s)
			t.steps = append(t.steps, took)
			if every > 0 && i%every == 0 {
				t.saving = append(t.saving, took)
			}
		}
		err = ck.Close()
		t.total = time.Since(start)
		return t, err
	}
	for range 3 { // compile and warm up
		if err := step(); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "ckbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var plain, saving []runTimes
	for range 2 { // alternated
		p, err := measure(dir+"/none", 0)
		if err != nil {
			return err
		}
		s, err := measure(dir+"/every", every)
		if err != nil {
			return err
		}
		plain, saving = append(plain, p), append(saving, s)
	}
	state := int64(width*width+width) * 4
	fmt.Printf("state %.1f MB, %d steps per run, a checkpoint every %d, 2 alternated runs each\n", float64(state)/1e6, steps, every)
	for i := range plain {
		p, s := plain[i], saving[i]
		fmt.Printf("run %d: without checkpoints median step %v, whole run %v; with: median step %v, saving steps median %v (%d of them), whole run %v: %.3f×\n",
			i+1, median(p.steps), p.total.Round(time.Millisecond), median(s.steps), median(s.saving), len(s.saving),
			s.total.Round(time.Millisecond), float64(s.total)/float64(p.total))
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
