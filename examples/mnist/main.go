// Command mnist trains an MLP on MNIST with N local replicas (xmp.spawn
// style: one goroutine per device, gradients averaged by an in-graph
// all-reduce), then reports test accuracy from replica 0's model.
//
//	go run ./examples/mnist --replicas 2 --epochs 1
//
// The learning rate is --lr × replicas, the usual linear scaling for the
// larger global batch; --scale-lr=false keeps it as given.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

type config struct {
	replicas, epochs, batchSize, hidden, maxBatches int
	lr                                              float64
	scaleLR                                         bool
	dataDir, checkpoint                             string
}

// result is what a run measured.
type result struct {
	Accuracy float64
	// InputWait is each replica's share of the last epoch spent waiting for input.
	InputWait []float64
	Trained   time.Duration
}

func main() {
	_, err := run(context.Background(), os.Args[1:], os.Stdout)
	cli.Exit("mnist", err)
}

func parse(args []string) (config, error) {
	var c config
	flags := pflag.NewFlagSet("mnist", pflag.ContinueOnError)
	flags.IntVar(&c.replicas, "replicas", 2, "local replicas (CPU devices)")
	flags.IntVar(&c.epochs, "epochs", 1, "epochs to train")
	flags.IntVar(&c.batchSize, "batch-size", 64, "batch size per replica")
	flags.IntVar(&c.hidden, "hidden", 128, "hidden units")
	flags.IntVar(&c.maxBatches, "max-batches", 0, "stop each epoch after this many batches (0: all)")
	flags.Float64Var(&c.lr, "lr", 0.025, "learning rate per replica (SGD, momentum 0.9)")
	flags.BoolVar(&c.scaleLR, "scale-lr", true, "multiply the learning rate by the number of replicas")
	flags.StringVar(&c.dataDir, "data", data.DefaultMNISTDir(), "directory with the MNIST idx files (make deps installs them)")
	flags.StringVar(&c.checkpoint, "checkpoint", "", "save a training checkpoint (safetensors) here after each epoch")
	if err := flags.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.replicas < 1:
		return c, fmt.Errorf("--replicas=%d: need at least 1", c.replicas)
	case c.epochs < 1 || c.batchSize < 1 || c.hidden < 1 || c.maxBatches < 0:
		return c, fmt.Errorf("--epochs, --batch-size and --hidden must be positive, --max-batches >= 0")
	case c.lr <= 0:
		return c, fmt.Errorf("--lr=%g: must be positive", c.lr)
	}
	return c, nil
}

// shard gives replica rank every world-th index of the shuffled epoch.
type shard struct {
	base        data.Sampler
	rank, world int
}

func (s shard) Indices(epoch int) []int {
	var out []int
	all := s.base.Indices(epoch)
	for i := s.rank; i < len(all); i += s.world {
		out = append(out, all[i])
	}
	return out
}

func newModel(d *xla.Device, hidden int) (nn.Module, error) {
	l1, err := nn.NewLinear(d, nn.NewRand(1), 784, hidden, true)
	if err != nil {
		return nil, err
	}
	l2, err := nn.NewLinear(d, nn.NewRand(2), hidden, 10, true)
	return nn.NewSequential(nn.Flatten{}, l1, nn.ReLU{}, l2), err
}

func run(ctx context.Context, args []string, out io.Writer) (result, error) {
	c, err := parse(args)
	if err != nil {
		return result{}, err
	}
	res, err := train(ctx, c, out)
	if err != nil {
		return result{}, err
	}
	return res, nil
}

func train(ctx context.Context, c config, out io.Writer) (res result, err error) {
	trainSet, err := data.NewMNIST(c.dataDir, true)
	if err != nil {
		return res, err
	}
	testSet, err := data.NewMNIST(c.dataDir, false)
	if err != nil {
		return res, err
	}
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, Replicas: c.replicas})
	if err != nil {
		return res, err
	}
	defer b.Close()
	eng := xla.NewEngine(b)
	lr := c.lr
	if c.scaleLR {
		lr *= float64(c.replicas)
	}
	fmt.Fprintf(out, "training a 784-%d-10 MLP on %d %s replicas, batch %d per replica, lr %g\n",
		c.hidden, c.replicas, b.Target(), c.batchSize, lr)

	start := time.Now()
	var model nn.Module
	res.InputWait = make([]float64, c.replicas)
	err = eng.RunReplicas(ctx, c.replicas, func(ctx context.Context, r xla.Replica) error {
		d := r.Device()
		m, err := newModel(d, c.hidden)
		if err != nil {
			return err
		}
		if r.Index() == 0 {
			model = m
		}
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDConfig{LR: lr, Momentum: 0.9})
		if err != nil {
			return err
		}
		sampler := shard{base: data.RandomSampler{N: trainSet.Len(), Seed: 42}, rank: r.Index(), world: r.Count()}
		loader, err := data.NewLoader(trainSet, d, data.LoaderConfig{BatchSize: c.batchSize, DropLast: true, Sampler: sampler})
		if err != nil {
			return err
		}
		for epoch := range c.epochs {
			var loss *xla.Tensor
			for batch, err := range loader.Epoch(ctx, epoch) {
				if err != nil {
					return err
				}
				if c.maxBatches > 0 && batch.Index >= c.maxBatches {
					break
				}
				opt.ZeroGrad()
				loss = nn.CrossEntropyLoss(m.Forward(batch.Input), batch.Target, nn.ReductionMean)
				if err := loss.Backward(); err != nil {
					return err
				}
				for _, p := range nn.Parameters(m) {
					if err := p.SetGrad(xla.AllReduce(p.Grad(), xla.ReduceMean)); err != nil {
						return err
					}
				}
				if err := opt.Step(); err != nil {
					return err
				}
				if err := r.MarkStep(ctx); err != nil {
					return err
				}
			}
			res.InputWait[r.Index()] = loader.Stats().WaitFraction()
			if r.Index() != 0 || loss == nil {
				continue
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "epoch %d: last batch loss %.4f, input wait %.1f%% of the loop\n",
				epoch+1, v, 100*loader.Stats().WaitFraction())
			if c.checkpoint != "" {
				ck := optim.Checkpoint{Model: m, Optimizer: opt, Epoch: epoch + 1}
				if err := optim.SaveCheckpoint(ctx, c.checkpoint, ck); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Trained = time.Since(start)
	trained := res.Trained

	nn.Eval(model)
	loader, err := data.NewLoader(testSet, eng.Device(0), data.LoaderConfig{BatchSize: 1000})
	if err != nil {
		return res, err
	}
	correct := 0.0
	for batch, err := range loader.Epoch(ctx, 0) {
		if err != nil {
			return res, err
		}
		hits, err := model.Forward(batch.Input).ArgMax(1).Equal(batch.Target).Cast(xla.Float32).Sum().Item(ctx)
		if err != nil {
			return res, err
		}
		correct += hits
	}
	res.Accuracy = correct / float64(testSet.Len())
	m := xla.GetMetrics()
	fmt.Fprintf(out, "test accuracy %.2f%% (%d images); trained in %v; programs: %d compiled, %d loaded from the disk cache, %d cache hits\n",
		100*res.Accuracy, testSet.Len(), trained.Round(time.Millisecond), m.Compilations, m.PersistentCacheHits, m.CacheHits)
	return res, nil
}
