package ddp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/regroup"
	"github.com/xladdp/xladdp/ddp/internal/termination"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/xla"
)

// Options chooses how Run runs a training function: the launch mode,
// the device target (PJRT) and the process group's transport.
type Options struct {
	// Spawn runs one process with a replica per local device (xmp.spawn:
	// Devices of them, else the count a launcher gives the target (on
	// Trainium, its NeuronCores), else the target's
	// devices); started by a launcher (ddprun, torchrun, mpirun), that
	// process is also one rank of the job, which then has a rank's
	// replicas per process. Otherwise this process is one rank of a job a
	// launcher started and drives one device.
	Spawn   bool
	Devices int
	// CPUDevices is the CPU device count to spawn on when the target is
	// the CPU (--cpu-devices); ignored on other targets.
	CPUDevices int
	// Device opens the device target: cpu, cuda, neuron ($XLADDP_DEVICE
	// or $PJRT_DEVICE by default), its plugin and client options.
	Device backend.Options
	// InitMethod is how a rank joins the job (default "env://"; also
	// "tcp://HOST:PORT" and "file:///shared/file").
	InitMethod string
	// Transport carries the process group: "tcp" or "mpi" (default
	// $XLADDP_BACKEND, else tcp).
	Transport string
	// Checkpoints is where the program keeps its checkpoints
	// (--checkpoint-dir, --checkpoint-every), handed to fn as
	// Worker.Checkpoints. A Dir the program never opens a checkpointer
	// on is an error when fn returns, not a silent loss.
	Checkpoints checkpoint.Options
	// Mode is the job's (--deterministic, --micro-shard): Run opens the
	// backend for it and hands it to fn as Worker.Mode.
	Mode Mode
}

// Run runs fn as every replica of this process, in either of the
// tutorials' launch modes (see Options.Spawn), so one program runs both
// ways: joining the default group first as a launcher's rank and leaving
// it after. It returns the first replica's error.
func Run(ctx context.Context, fn func(ctx context.Context, w Worker) error, o Options) error {
	if fn == nil {
		return errors.New("ddp: Run of a nil function")
	}
	if err := o.Mode.check(); err != nil {
		return err
	}
	fn = withJob(fn, o.Checkpoints, o.Mode)
	target, err := backend.ResolveTarget(o.Device.Target)
	if err != nil {
		return fmt.Errorf("ddp: Run: %w", err)
	}
	device := o.Device
	device.Target = target
	device.Deterministic = device.Deterministic || o.Mode.Deterministic
	if target != backend.CPU {
		device.CPUDevices = 0
	}
	opts := dist.NewOptions()
	if o.InitMethod != "" {
		opts.InitMethod = o.InitMethod
	}
	if o.Transport != "" {
		opts.Transport = o.Transport
	}
	if err := opts.CheckTransport(); err != nil {
		return err
	}
	devices := 1
	if o.Spawn {
		if target == backend.CPU && device.CPUDevices == 0 {
			device.CPUDevices = o.CPUDevices
		}
		if !opts.Launched() && opts.Transport != dist.TransportMPI {
			return Spawn(ctx, fn, SpawnOptions{Devices: o.Devices, Device: device, ExitChild: true})
		}
		// Spawned under a launcher: this process is one rank of the job
		// and drives all its local devices (one process per node on
		// Trn1), all-reducing in-graph across them and through the
		// process group across processes.
		devices = o.Devices
	} else if target == backend.CPU {
		device.CPUDevices = 1
	}
	return runInGroup(ctx, fn, opts, SpawnOptions{Devices: devices, Device: device, ExitChild: true})
}

// runInGroup joins the job's group and runs fn as this process's
// replicas. When every replica committed after a peer's loss, it
// regroups in place (regroup.InPlace) and runs fn again, which resumes
// from that commit, for as long as ddprun assigns it a place; so it does
// once they held a step for a joining node.
func runInGroup(ctx context.Context, fn func(ctx context.Context, w Worker) error, given dist.Options, so SpawnOptions) (err error) {
	// A step held for a joining node that no heal took (the wait for a
	// place failed or was stopped, the next group never formed) is
	// committed after all.
	defer func() { err = errors.Join(err, commitHeld()) }()
	opts := given
	for {
		ends := &regroup.Ends{}
		group, err := runOnce(ctx, regroup.Count(ends, fn), opts, so)
		if !ends.AllCommitted() {
			return err
		}
		again, regroupErr := regroup.InPlace(ctx, group, os.Stderr)
		switch {
		case regroupErr != nil:
			return regroup.Failed{Commit: err, Why: regroupErr, Stopped: ctx.Err() != nil}
		case !again:
			return err
		}
		opts = dist.NewOptions()
		opts.InitMethod, opts.Transport = given.InitMethod, given.Transport
	}
}

// runOnce joins the group, runs fn as this process's replicas and
// leaves the group, saying how it was formed.
func runOnce(ctx context.Context, fn func(ctx context.Context, w Worker) error, opts dist.Options, so SpawnOptions) (regroup.Group, error) {
	if err := dist.Init(ctx, opts); err != nil {
		if errors.Is(err, dist.ErrNoLauncher) {
			return regroup.Group{}, fmt.Errorf("ddp: RANK is not set: %w: use --spawn (one process, a replica per local device), "+
				"or start it with ddprun, torchrun or mpirun (e.g. %s)", dist.ErrNoLauncher, "ddprun --nproc_per_node=2 "+filepath.Base(os.Args[0]))
		}
		return regroup.Group{}, err
	}
	g := dist.Current()
	target := so.Device.Target
	group := regroup.Group{Timeout: g.Timeout(), Regroups: opts.InitMethod == "env://" && g.Transport() == dist.TransportTCP &&
		(target == backend.CPU || target == backend.CUDA)}
	regroup.SetActive(group.Regroups)
	err := Spawn(ctx, fn, so)
	regroup.SetActive(false)
	return group, errors.Join(err, dist.Destroy())
}

// commitHeld writes the step this process held for a joining node into
// its checkpoint directory, saying so, when it does not regroup.
func commitHeld() error {
	path, err := checkpoint.CommitHeld()
	if path != "" {
		fmt.Fprintf(os.Stderr, "ddp: the step held for the joining node is committed in %s: the job resumes from it\n", path)
	}
	return err
}

// withJob hands fn the job's checkpoint options and mode, and refuses,
// once fn succeeded, a --checkpoint-dir it never kept a checkpoint in.
func withJob(fn func(ctx context.Context, w Worker) error, o checkpoint.Options, mode Mode) func(ctx context.Context, w Worker) error {
	return func(ctx context.Context, w Worker) error {
		w.Checkpoints, w.Mode = o, mode
		before := termination.Holds()
		job := &replicaJob{mode: mode}
		replicaJobs.Store(w.Device, job)
		defer replicaJobs.Delete(w.Device)
		err := fn(ctx, w)
		switch {
		case err == nil && o.Dir != "" && termination.Holds() == before:
			return fmt.Errorf("ddp: --checkpoint-dir %s: this program opened no checkpointer there, so nothing was kept: "+
				"train with checkpoint.Steps(ctx, w.Checkpoints, …) or checkpoint.New(w.Checkpoints), or drop the flag", o.Dir)
		case err == nil && mode.Deterministic && !job.wrapped.Load():
			return errors.New("ddp: --deterministic: this program made no deterministic wrapper, so the flag changed nothing: " +
				"wrap the model with w.Wrap(ctx, model, ddp.Batch{…}), or drop the flag")
		}
		return err
	}
}

// replicaJob is Run's job on a replica's device: its mode, and whether a
// wrapper of that mode was made there.
type replicaJob struct {
	mode    Mode
	wrapped atomic.Bool
}

var replicaJobs sync.Map

// checkJobMode refuses a plain wrapper on a replica of a deterministic
// job: it would train without the mode the flag asked for, in silence.
func checkJobMode(dev *xla.Device, deterministic bool) error {
	v, ok := replicaJobs.Load(dev)
	if !ok {
		return nil
	}
	job := v.(*replicaJob)
	if job.mode.Deterministic && !deterministic {
		return errors.New("ddp: Wrap: the job runs --deterministic, but this wrapper was made without it: " +
			"wrap with w.Wrap(ctx, model, ddp.Batch{…}) (or ddp.Deterministic), or drop the flag")
	}
	job.wrapped.Store(true)
	return nil
}

// Flags registers Run's flags on fs: --spawn, --init-method, --backend
// (the transport; default $XLADDP_BACKEND, else tcp), --cpu-devices,
// --device (default $XLADDP_DEVICE, else $PJRT_DEVICE, else cpu),
// --checkpoint-dir and --checkpoint-every (Options.Checkpoints), and
// --deterministic and --micro-shard (Options.Mode). Read the options after
// fs.Parse.
func Flags(fs *pflag.FlagSet) *Options {
	o := &Options{CPUDevices: 2}
	o.Checkpoints.AddFlags(fs)
	o.Mode.addFlags(fs)
	fs.BoolVar(&o.Spawn, "spawn", false, "one process, a replica per local device (xmp.spawn); else one rank of a ddprun/torchrun/mpirun job")
	fs.StringVar(&o.InitMethod, "init-method", "env://", "how a rank joins the job: env://, tcp://HOST:PORT or file:///shared/file")
	TransportFlag(fs, &o.Transport)
	fs.Func("cpu-devices", "CPU devices to spawn on, cpu target (default 2)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > backend.MaxCPUDevices {
			return fmt.Errorf("want a count from 1 to %d", backend.MaxCPUDevices)
		}
		o.CPUDevices = n
		return nil
	})
	fs.Func("device", "target: cpu, cuda or neuron (default $XLADDP_DEVICE, else $PJRT_DEVICE, else cpu)", func(s string) error {
		t, err := backend.ParseTarget(s)
		o.Device.Target = t
		return err
	})
	return o
}

// TransportFlag registers --backend on fs (torch's name for it), setting
// *transport: the process group's transport, tcp or mpi, checked at once
// (the default, "", means $XLADDP_BACKEND, else tcp).
func TransportFlag(fs *pflag.FlagSet, transport *string) {
	fs.Func("backend", "process group transport: tcp, or mpi under mpirun in a build with -tags mpi (default $XLADDP_BACKEND, else tcp)",
		func(s string) error {
			o := dist.Options{Transport: s, InitMethod: "env://"}
			if err := o.CheckTransport(); err != nil {
				return err
			}
			*transport = o.Transport
			return nil
		})
}

// Main is a training program's main: it parses the command line (Run's
// flags and any the program registered on pflag.CommandLine) and runs fn
// with Run. SIGINT cancels fn's context; so does SIGTERM, except while a
// Checkpointer lives: it is then a preemption notice, on which the
// checkpointer commits the step and fn returns ErrPreempted. Main exits 0
// when fn succeeded, ExitPreempted (75) when every replica was preempted,
// else 1 with the error on stderr.
func Main(fn func(ctx context.Context, w Worker) error) {
	o := Flags(pflag.CommandLine)
	if err := cli.MisplacedLauncherOption(os.Args[1:], func(name string) bool { return pflag.Lookup(name) != nil }); err != nil {
		exit(err)
	}
	pflag.Parse()
	ctx, stop := NotifyContext(context.Background())
	err := Run(ctx, fn, *o)
	stop()
	exit(err)
}

// NotifyContext is the program's signal policy, Main's and the examples':
// a copy of parent that SIGINT cancels, and SIGTERM too unless a
// Checkpointer lives (it then checkpoints and stops the job, on a context
// left live for the save). Handlers the program adds with signal.Notify
// still get every signal. stop releases the signals.
func NotifyContext(parent context.Context) (ctx context.Context, stop func()) {
	return termination.Context(parent)
}

// exit ends the process after fn's job returned err: 0, ExitPreempted for
// a preempted job, else 1 with err on stderr.
func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(cli.Status(err))
}
