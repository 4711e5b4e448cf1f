package ddp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/dist"
)

// LaunchOptions chooses how Launch runs a training function.
type LaunchOptions struct {
	// Spawn runs one process with a replica per local device (xmp.spawn:
	// Devices of them, else $NEURON_NUM_DEVICES, else the target's
	// devices); started by a launcher (ddprun, torchrun, mpirun), that
	// process is also one rank of the job, which then has a rank's
	// replicas per process. Otherwise this process is one rank of a job a
	// launcher started and drives one device.
	Spawn   bool
	Devices int
	// InitMethod is how a rank joins the job (default "env://"; also
	// "tcp://HOST:PORT" and "file:///shared/file").
	InitMethod string
	// CPUDevices is the CPU device count to spawn on when the target is
	// the CPU (the examples' --cpu-devices); ignored on other targets.
	CPUDevices int
	// Backend opens the target ($XLADDP_DEVICE or $PJRT_DEVICE by default).
	Backend backend.Options
	// GroupBackend is the process group's backend in run mode: "tcp" or
	// "mpi" (Options.Backend; default $XLADDP_BACKEND, else tcp).
	GroupBackend string
}

// Launch runs fn as every replica of this process, in either of the
// tutorials' launch modes (see LaunchOptions.Spawn), so one program runs
// both ways: joining the default group first in run mode and leaving it
// after. It returns the first replica's error.
func Launch(ctx context.Context, fn func(ctx context.Context, w Worker) error, o LaunchOptions) (err error) {
	if fn == nil {
		return errors.New("ddp: Launch of a nil function")
	}
	target, err := backend.ResolveTarget(o.Backend.Target)
	if err != nil {
		return fmt.Errorf("ddp: Launch: %w", err)
	}
	bo := o.Backend
	bo.Target = target
	if target != backend.CPU {
		bo.CPUDevices = 0
	}
	opts := dist.NewOptions()
	if o.InitMethod != "" {
		opts.InitMethod = o.InitMethod
	}
	if o.GroupBackend != "" {
		opts.Backend = o.GroupBackend
	}
	if err := opts.CheckBackend(); err != nil {
		return err
	}
	devices := 1
	if o.Spawn {
		if target == backend.CPU && bo.CPUDevices == 0 {
			bo.CPUDevices = o.CPUDevices
		}
		if !opts.Launched() && opts.Backend != dist.BackendMPI {
			return Spawn(ctx, fn, SpawnOptions{Devices: o.Devices, Backend: bo, ExitChild: true})
		}
		// Spawned under a launcher: this process is one rank of the job
		// and drives all its local devices (one process per node on
		// Trn1), all-reducing in-graph across them and through the
		// process group across processes.
		devices = o.Devices
	} else if target == backend.CPU {
		bo.CPUDevices = 1
	}
	if err := dist.Init(ctx, opts); err != nil {
		if errors.Is(err, dist.ErrNoLauncher) {
			return fmt.Errorf("ddp: RANK is not set: %w: use --spawn (one process, a replica per local device), "+
				"or start it with ddprun, torchrun or mpirun (e.g. %s)", dist.ErrNoLauncher, launcherExample())
		}
		return err
	}
	defer func() { err = errors.Join(err, dist.Destroy()) }()
	return Spawn(ctx, fn, SpawnOptions{Devices: devices, Backend: bo, ExitChild: true})
}

// launcherExample is the ddprun command line that starts this program.
func launcherExample() string { return "ddprun --nproc_per_node=2 " + filepath.Base(os.Args[0]) }

// LaunchFlags registers the examples' launch flags on fs: --spawn,
// --init-method, --backend (default $XLADDP_BACKEND, else tcp),
// --cpu-devices and --device (default $XLADDP_DEVICE, else $PJRT_DEVICE,
// else cpu). Read the options after fs.Parse.
func LaunchFlags(fs *flag.FlagSet) *LaunchOptions {
	o := &LaunchOptions{}
	fs.BoolVar(&o.Spawn, "spawn", false, "one process, a replica per local device (xmp.spawn); else one rank of a ddprun/torchrun/mpirun job")
	fs.StringVar(&o.InitMethod, "init-method", "env://", "how a rank joins the job: env://, tcp://HOST:PORT or file:///shared/file")
	BackendFlag(fs, &o.GroupBackend)
	o.CPUDevices = 2
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
		o.Backend.Target = t
		return err
	})
	return o
}

// BackendFlag registers --backend on fs, setting *backend: the process
// group's backend, tcp or mpi (checked at once; the default, "", means
// $XLADDP_BACKEND, else tcp).
func BackendFlag(fs *flag.FlagSet, backend *string) {
	fs.Func("backend", "process group backend: tcp, or mpi under mpirun in a build with -tags mpi (default $XLADDP_BACKEND, else tcp)",
		func(s string) error {
			o := dist.Options{Backend: s, InitMethod: "env://"}
			if err := o.CheckBackend(); err != nil {
				return err
			}
			*backend = o.Backend
			return nil
		})
}

// Main is a training program's main: it parses the command line (the
// launch flags and any the program registered on flag.CommandLine), runs
// fn with Launch until it returns or SIGINT/SIGTERM, and exits 1 with the
// error on stderr.
func Main(fn func(ctx context.Context, w Worker) error) {
	o := LaunchFlags(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Launch(ctx, fn, *o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
