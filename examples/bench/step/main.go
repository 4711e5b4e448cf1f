// Command step times one training step of a benchmark model on CPU
// replicas, the xladdp side of `make bench`'s comparison with JAX,
// torch-xla and PyTorch (examples/bench/peers).
//
//	go run ./examples/bench/step --model cnn --replicas 1 --steps 20
//
// Models: "cnn" is the smdistributed MNIST CNN (conv 1→32→64, max-pool,
// dropout, fc 9216→128→10, log-softmax, NLL, Adadelta lr 1.0) on a batch
// of 64 random images per replica; "toy" is the Neuron DDP tutorial's MLP
// (10→10→5, MSE, SGD lr 0.001, batch 20); "gpt" is examples/gpt's small
// GPT (4 layers, 4 heads, 128 wide, block 64, vocabulary 65, batch 32;
// AdamW with decay groups, clipping at 1). Every replica trains the same
// model on its own batch with gradients averaged in-graph.
//
// --init-out writes the initial weights and each replica's batch as
// safetensors (torch names and layouts), so the peers start from the same
// state; the first line of output is the eval-mode loss of those weights
// on replica 0's batch, which every runner must agree on.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/examples/bench/internal/stats"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

type config struct {
	model                                 string
	replicas, samples, steps, warmup, per int
	batch                                 int
	initOut                               string
	seed                                  uint64
	compiled                              bool
	device                                backend.Target
	// ddp wraps the model in ddp.Wrap instead of averaging by hand;
	// processes > 1 runs that many ranks of a process group (this binary
	// relaunched), each with replicas local devices.
	ddp       bool
	processes int
}

// Result is the JSON line the command prints.
type Result struct {
	Runner      string  `json:"runner"`
	Mode        string  `json:"mode"`
	Model       string  `json:"model"`
	Replicas    int     `json:"replicas"`
	StepsPerRun int     `json:"steps_per_markstep"`
	InitialLoss float64 `json:"initial_loss"`
	// FinalLoss is the eval-mode loss on replica 0's batch after every step.
	FinalLoss float64 `json:"final_loss"`
	// StepMS are the per-step times of each timed MarkStep (its steps averaged).
	StepMS       []float64 `json:"step_ms"`
	MedianStepMS float64   `json:"median_step_ms"`
	SamplesPerS  float64   `json:"samples_per_s"`
	Compilations int64     `json:"compilations"`
	// PeakRSSMB is the process's peak resident memory over the timed
	// steps (Linux; the CPU device's memory is the process's).
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	DDP       bool    `json:"ddp,omitempty"`
	Processes int     `json:"processes,omitempty"`
	// HostPath is rank 0's time split of a host-path step, in ms per step.
	HostPath *hostSplit `json:"host_path,omitempty"`
	// Convolutions is the step's convolutions in oneDNN (cpu, where it
	// runs them).
	Convolutions *convShare `json:"onednn_convolutions,omitempty"`
}

// hostSplit is ddp.HostPathStats per step, in milliseconds.
type hostSplit struct {
	ExecuteMS, DownloadMS, AllReduceMS, UploadMS float64
}

func main() {
	cli.Exit("step", run(context.Background(), os.Args[1:], os.Stdout))
}

func parse(args []string) (config, error) {
	var c config
	f := pflag.NewFlagSet("step", pflag.ContinueOnError)
	f.StringVar(&c.model, "model", "cnn", "cnn (MNIST CNN, Adadelta), toy (MLP, SGD), resnet18 (224x224, SGD momentum), resnet18-cifar (the CIFAR-10 stem at 32x32, batch 32, SGD momentum) or gpt (examples/gpt's small GPT, block 64, batch 32, AdamW groups, clipping)")
	f.IntVar(&c.replicas, "replicas", 1, "CPU replicas (devices)")
	f.IntVar(&c.samples, "samples", 7, "timed samples; the figure is their median")
	f.IntVar(&c.steps, "steps", 5, "training steps per sample (timed together, synchronized at the end)")
	f.IntVar(&c.warmup, "warmup", 3, "untimed training steps first (compilation)")
	f.IntVar(&c.batch, "batch", 0, "batch per replica (0: the model's, 64 for cnn)")
	f.IntVar(&c.per, "steps-per-markstep", 1, "training steps traced per MarkStep (or per compiled Run)")
	f.StringVar(&c.initOut, "init-out", "", "write the initial weights and batches here (safetensors) and exit")
	f.Uint64Var(&c.seed, "seed", 1, "seed of the initial weights and batches")
	device := f.String("device", "cpu", "the target: cpu, or cuda (one replica a GPU)")
	mode := f.String("mode", "lazy", "lazy (MarkStep) or compiled (xla.Compile, one Run per step)")
	f.BoolVar(&c.ddp, "ddp", false, "wrap the model with ddp.Wrap (else gradients are averaged by hand)")
	f.IntVar(&c.processes, "processes", 1, "processes (ranks over the host process group, implies --ddp), each with --replicas devices")
	err := f.Parse(args)
	if err != nil {
		return c, err
	}
	c.compiled = *mode == "compiled"
	if c.device, err = backend.ParseTarget(*device); err != nil {
		return c, fmt.Errorf("--device: %w", err)
	}
	c.ddp = c.ddp || c.processes > 1
	switch {
	case *mode != "lazy" && *mode != "compiled":
		return c, fmt.Errorf("--mode=%q: want lazy or compiled", *mode)
	case c.model != "cnn" && c.model != "toy" && c.model != "resnet18" && c.model != "resnet18-cifar" && c.model != "gpt":
		return c, fmt.Errorf("--model=%q: want cnn, toy, resnet18, resnet18-cifar or gpt", c.model)
	case c.batch < 0:
		return c, fmt.Errorf("--batch=%d: want at least 1 (or 0, the model's)", c.batch)
	case c.processes < 1:
		return c, fmt.Errorf("--processes=%d: want at least 1", c.processes)
	case c.replicas < 1 || c.samples < 1 || c.steps < 1 || c.warmup < 0 || c.per < 1:
		return c, fmt.Errorf("--replicas, --samples, --steps and --steps-per-markstep must be >= 1, --warmup >= 0")
	case c.steps%c.per != 0 || c.warmup%c.per != 0:
		return c, fmt.Errorf("--steps=%d and --warmup=%d must be multiples of --steps-per-markstep=%d", c.steps, c.warmup, c.per)
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	s := specOf(c.model)
	if c.batch > 0 {
		s.batch = c.batch
	}
	if c.processes > 1 && os.Getenv(dist.EnvRank) == "" {
		return launchRanks(ctx, args, c.processes, out)
	}
	if c.processes > 1 {
		if err := dist.Init(ctx, dist.NewOptions()); err != nil {
			return err
		}
		defer dist.Destroy()
	}
	opts := backend.Options{Target: c.device}
	if c.device == backend.CPU {
		opts.CPUDevices = c.replicas
	}
	b, err := backend.Open(ctx, opts)
	if err != nil {
		return err
	}
	eng := xla.NewEngine(b)
	defer eng.Close()
	if c.initOut != "" {
		return writeInit(ctx, eng.Device(0), s, c)
	}
	res := Result{Runner: "xladdp", Mode: "lazy", Model: c.model, Replicas: c.replicas, StepsPerRun: c.per, DDP: c.ddp, Processes: c.processes}
	if c.compiled {
		res.Mode = "compiled"
	}
	times := make([][]float64, c.replicas)
	err = eng.RunReplicas(ctx, c.replicas, func(ctx context.Context, r xla.Replica) error {
		return runReplica(ctx, r, s, c, &res, times)
	})
	if err != nil {
		return err
	}
	return report(out, res, times[0], s, c)
}

// runReplica sets up and trains replica r: the initial loss, the warm-up,
// the timed samples (into times[r]) and the final loss, which replica 0
// records in res.
func runReplica(ctx context.Context, r xla.Replica, s spec, c config, res *Result, times [][]float64) error {
	rs, err := s.setUp(r.Device(), c.seed, dist.Current().Rank()*c.replicas+r.Index())
	if err != nil {
		return err
	}
	if c.ddp {
		wrapped, err := ddp.Wrap(ctx, rs.model, ddp.GradientAsBucketView())
		if err != nil {
			return err
		}
		defer wrapped.Close()
		rs.model = wrapped
	}
	nn.Eval(rs.model)
	initial, err := s.loss(rs.model.Forward(rs.x), rs.y).Item(ctx)
	if err != nil {
		return err
	}
	if r.Index() == 0 {
		res.InitialLoss = initial
	}
	nn.Train(rs.model)
	steps := stepper(ctx, r, rs, s, c)
	if err := steps(c.warmup); err != nil {
		return err
	}
	if r.Index() == 0 {
		resetPeakRSS()
	}
	// The split covers the timed steps only.
	var before ddp.HostPathStats
	if w, ok := rs.model.(*ddp.DistributedDataParallel); ok {
		before = w.HostPathStats()
	}
	convBefore := backend.OneDNNCalls()
	for range c.samples {
		start := time.Now()
		if err := steps(c.steps); err != nil {
			return err
		}
		times[r.Index()] = append(times[r.Index()], float64(time.Since(start).Microseconds())/1000/float64(c.steps))
	}
	// Every replica reads its loss: a read is a MarkStep, which the
	// replicas meet.
	nn.Eval(rs.model)
	final, err := s.loss(rs.model.Forward(rs.x), rs.y).Item(ctx)
	if r.Index() == 0 {
		recordFinal(res, rs, c, final, before, convBefore)
	}
	return err
}

// stepper returns a function that runs n training steps, a MarkStep (or
// a compiled Run) every c.per, and waits until the last step's parameters
// are computed.
func stepper(ctx context.Context, r xla.Replica, rs *replicaState, s spec, c config) func(n int) error {
	compiled := xla.Compile(func(...*xla.Tensor) ([]*xla.Tensor, error) {
		for range c.per {
			if err := rs.step(s, c.replicas); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	return func(n int) error {
		for range n / c.per {
			if c.compiled {
				if _, err := compiled.Run(ctx, r.Device()); err != nil {
					return err
				}
				continue
			}
			for range c.per {
				if err := rs.step(s, c.replicas); err != nil {
					return err
				}
			}
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
		}
		_, err := rs.params[0].Float32s(ctx)
		return err
	}
}

// recordFinal records replica 0's final loss, its convolutions in oneDNN
// and, over processes, its host path's split of the timed steps (those
// after the readings before and convBefore).
func recordFinal(res *Result, rs *replicaState, c config, final float64, before ddp.HostPathStats, convBefore backend.OneDNNConvolutions) {
	res.FinalLoss = final
	res.Convolutions = oneDNNShare(convBefore, backend.OneDNNCalls(), c.samples*c.steps*c.replicas)
	if w, ok := rs.model.(*ddp.DistributedDataParallel); ok && c.processes > 1 {
		st := w.HostPathStats()
		steps := max(st.Steps-before.Steps, 1)
		per := func(d, was time.Duration) float64 { return float64((d - was).Microseconds()) / 1000 / float64(steps) }
		res.HostPath = &hostSplit{ExecuteMS: per(st.Execute, before.Execute), DownloadMS: per(st.Download, before.Download),
			AllReduceMS: per(st.AllReduce, before.AllReduce), UploadMS: per(st.Upload, before.Upload)}
	}
}

// report completes res from replica 0's step times and the process's
// metrics and, on rank 0, prints it.
func report(out io.Writer, res Result, times []float64, s spec, c config) error {
	res.StepMS = times
	res.MedianStepMS = stats.Median(times)
	res.SamplesPerS = float64(s.batch*c.replicas*c.processes) / (res.MedianStepMS / 1000)
	res.Compilations = xla.GetMetrics().Compilations
	res.PeakRSSMB = peakRSSMB()
	if dist.Current().Rank() > 0 {
		return nil // rank 0 reports
	}
	return json.NewEncoder(out).Encode(res)
}

// launchRanks runs this command as n ranks of a process group on this
// host (torchrun's environment variables, each rank bound to its share of
// the CPUs unless $XLADDP_BIND_CPUS says otherwise) and copies rank 0's
// output.
func launchRanks(ctx context.Context, args []string, n int, out io.Writer) error {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", dist.EnvRank, r), fmt.Sprintf("%s=%d", dist.EnvWorldSize, n),
			dist.EnvMasterAddr+"=127.0.0.1", fmt.Sprintf("%s=%d", dist.EnvMasterPort, port))
		if _, set := os.LookupEnv(dist.EnvBindCPUs); !set {
			// Each rank on its own cores, as torchrun's OMP_NUM_THREADS=1
			// keeps PyTorch's ranks apart.
			cmd.Env = append(cmd.Env, dist.EnvBindCPUs+"=1")
		}
		cmd.Stderr = os.Stderr
		if r == 0 {
			cmd.Stdout = out
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// writeInit writes the initial state dict and every replica's batch.
func writeInit(ctx context.Context, d *xla.Device, s spec, c config) error {
	model, err := s.build(d, nn.NewRand(c.seed))
	if err != nil {
		return err
	}
	named := nn.StateDict(model)
	for r := range c.replicas {
		x, y, err := s.upload(d, c.seed, r)
		if err != nil {
			return err
		}
		named = append(named, nn.Named{Name: fmt.Sprintf("batch.%d.x", r), Tensor: x}, nn.Named{Name: fmt.Sprintf("batch.%d.y", r), Tensor: y})
	}
	tensors, err := nn.EncodeTensors(ctx, named)
	if err != nil {
		return err
	}
	return safetensors.WriteFile(c.initOut, safetensors.File{Tensors: tensors})
}

// resetPeakRSS resets the kernel's peak-RSS counter (VmHWM), so the peak
// read later covers only the timed steps; best effort (Linux).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSSMB reads VmHWM from /proc/self/status, 0 where unavailable.
func peakRSSMB() float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

// convShare is a replica step's convolutions through oneDNN: their time
// (weight reorders included) and rate.
type convShare struct {
	MS     float64 `json:"ms"`
	GFLOPS float64 `json:"gflops"`
}

// oneDNNShare is the convolutions run between two readings, per replica
// step; nil where none ran in oneDNN.
func oneDNNShare(before, after backend.OneDNNConvolutions, replicaSteps int) *convShare {
	var d time.Duration
	var flop float64
	for i, a := range []backend.ConvolutionPass{after.Forward, after.InputGrad, after.WeightGrad} {
		b := []backend.ConvolutionPass{before.Forward, before.InputGrad, before.WeightGrad}[i]
		d += a.Time - b.Time
		flop += a.FLOP - b.FLOP
	}
	if d <= 0 || replicaSteps < 1 {
		return nil
	}
	return &convShare{MS: float64(d.Microseconds()) / 1000 / float64(replicaSteps), GFLOPS: flop / d.Seconds() / 1e9}
}
