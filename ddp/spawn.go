package ddp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
)

// SpawnOptions configures Spawn.
type SpawnOptions struct {
	// Devices is how many local devices to train on (0: every one the
	// target has: the count a launcher's environment gives it on
	// Neuron, the GPUs, or the CPU devices of $XLADDP_CPU_DEVICES).
	Devices int
	// Device opens the device target (its Replicas is set from Devices).
	Device backend.Options
	// Processes runs one process per device, re-executing this program
	// with the worker environment set (torch-xla's PJRT spawn), instead
	// of one process driving every device.
	Processes bool
	// Command is what Processes re-executes (default: this program with
	// its arguments).
	Command []string
	// ExitChild ends a process Spawn started once fn returns (exit 0, or
	// 1 with the error on stderr), so the code after Spawn runs in the
	// parent only, as with torch-xla's spawn; Launch and Main ask for it.
	// Without it Spawn returns fn's error in the child too, and
	// SpawnedChild tells the two apart.
	ExitChild bool
}

// SpawnedChild reports whether Spawn's process mode started this process.
func SpawnedChild() bool { return os.Getenv(workerenv.SpawnChild) == "1" }

// Worker is one replica of a spawned job, as fn sees it: its rank among
// every replica of the job, the job's replica count and its device.
//
// Random numbers follow one rule in every launch mode (--spawn, ddprun,
// torchrun, mpirun, Spawn's processes): the Device's random state starts
// from xla.DefaultSeed(Rank), the replica's global index in the job, so
// an unseeded RandN or Dropout draws the same numbers on replica r of a
// job of N however its replicas are spread over processes, and different
// numbers on each replica. A program that seeds its devices itself
// (Device.ManualSeed) is left as it seeds them.
type Worker struct {
	Rank, WorldSize, LocalRank int
	Device                     *xla.Device
	// Checkpoints is where Run's program keeps checkpoints
	// (Options.Checkpoints: --checkpoint-dir, --checkpoint-every), for
	// checkpoint.Steps or checkpoint.New; zero under Spawn alone.
	Checkpoints checkpoint.Options
	// Mode is the job's (Options.Mode: --deterministic, --micro-shard),
	// which Wrap and NewFeed follow; the plain mode under Spawn alone.
	Mode Mode
}

// Spawn is xmp.spawn: it runs fn once per local device and returns when
// all have, with the first error. By default one process drives every
// device: fn runs per device in xla.Engine.RunReplicas, and its Worker's
// Rank and WorldSize count the replicas (times the processes of the
// default group, when Init ran before). With Processes, the program is
// re-executed once per device; each process joins the default group
// (torchrun's environment, set by Spawn), runs fn on its one device and
// exits, so the code before Spawn runs in every process and the code
// after it in the parent only.
// A failing replica or process stops the others (see xla.RunReplicas and
// ddprun's failure policy), and Spawn's error names it.
func Spawn(ctx context.Context, fn func(ctx context.Context, w Worker) error, opts SpawnOptions) error {
	if fn == nil {
		return errors.New("ddp: Spawn of a nil function")
	}
	if opts.Devices < 0 {
		return fmt.Errorf("ddp: Spawn: Devices=%d cannot be negative", opts.Devices)
	}
	if SpawnedChild() {
		err := spawnChild(ctx, fn, opts)
		if err != nil {
			err = fmt.Errorf("ddp: Spawn: %w", err)
		}
		if !opts.ExitChild {
			return err
		}
		// The caller asked to end here, as torch-xla's spawned processes
		// do: the code after Spawn is the parent's.
		exit(err)
	}
	n, err := spawnDevices(opts)
	if err != nil {
		return err
	}
	if opts.Processes {
		return spawnProcesses(ctx, n, opts)
	}
	bo := opts.Device
	if n > 0 {
		bo.Replicas = n
		if bo.CPUDevices == 0 && (bo.Target == "" || bo.Target == backend.CPU) {
			bo.CPUDevices = n
		}
	}
	bo, err = withJobKeyValue(bo)
	if err != nil {
		return err
	}
	b, err := backend.Open(ctx, bo)
	if err != nil {
		return err
	}
	e := xla.NewEngine(b)
	defer e.Close()
	if err := shareProgramsInJob(e); err != nil {
		return err
	}
	if n == 0 {
		n = e.NumDevices()
	}
	rank, size := processRank()
	for i := range n {
		if err := e.Device(i).ManualSeed(xla.DefaultSeed(rank*n + i)); err != nil {
			return fmt.Errorf("ddp: Spawn: %w", err)
		}
	}
	return e.RunReplicas(ctx, n, func(ctx context.Context, r xla.Replica) error {
		return fn(ctx, Worker{Rank: rank*n + r.Index(), WorldSize: size * n, LocalRank: r.Index(), Device: r.Device()})
	})
}

// spawnDevices is the device count: given, or what a launcher's
// environment gives a target (0: the backend decides
// once open).
func spawnDevices(opts SpawnOptions) (int, error) {
	if opts.Devices > 0 {
		return opts.Devices, nil
	}
	if n, ok, err := backend.LocalDeviceCount(os.Getenv); err != nil {
		return 0, fmt.Errorf("ddp: Spawn: %w", err)
	} else if ok {
		return n, nil
	}
	if opts.Processes {
		if n, err := strconv.Atoi(os.Getenv(backend.EnvCPUDevices)); err == nil && n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("ddp: Spawn with Processes needs the device count: set SpawnOptions.Devices (or the count a launcher gives the target, or $%s)", backend.EnvCPUDevices)
	}
	return 0, nil
}

// spawnProcesses re-executes the program once per device with torchrun's
// worker environment and waits for all, supervised as ddprun supervises
// its workers (procset.Supervise): a failure stops the others (SIGTERM,
// then SIGKILL) a second later, and the error names every process that
// failed by then.
func spawnProcesses(ctx context.Context, n int, opts SpawnOptions) error {
	command := opts.Command
	if len(command) == 0 {
		command = os.Args
	}
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return fmt.Errorf("ddp: Spawn: %w", err)
	}
	target, err := backend.ResolveTarget(opts.Device.Target)
	if err != nil {
		return fmt.Errorf("ddp: Spawn: %w", err)
	}
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.Command(command[0], command[1:]...)
		// Each process sees its own device, as its target says (its GPU;
		// its NeuronCore, chosen in the process from LOCAL_RANK; one CPU
		// device).
		device, err := backend.ProcessEnv(target, r, n, os.Getenv)
		if err != nil {
			return fmt.Errorf("ddp: Spawn of %d processes: %w", n, err)
		}
		child := workerenv.Empty()
		child.SpawnChild = true
		child.Rank, child.WorldSize, child.LocalRank, child.LocalWorldSize = r, n, r, n
		child.MasterAddr, child.MasterPort = "127.0.0.1", strconv.Itoa(port)
		cmd.Env = append(append(os.Environ(), child.Environ()...), device...)
		cmds[r] = cmd
	}
	failed, err := procset.Supervise(ctx, cmds, os.Stdout, os.Stderr, failureGrace)
	if err != nil {
		return fmt.Errorf("ddp: Spawn: %w", err)
	}
	if len(failed) == 0 {
		return nil
	}
	msgs := make([]string, len(failed))
	for i, f := range failed {
		msgs[i] = fmt.Sprintf("process %d: %v", f.Index, f.Err)
	}
	return fmt.Errorf("ddp: Spawn: %s: %w", strings.Join(msgs, "; "), failed[0].Err)
}

// failureGrace is how long Spawn gathers failures after the first.
const failureGrace = time.Second

// spawnChild is a process Spawn started: join the group, open this
// process's device, run fn.
func spawnChild(ctx context.Context, fn func(ctx context.Context, w Worker) error, opts SpawnOptions) error {
	if err := dist.Init(ctx, dist.NewOptions()); err != nil {
		return err
	}
	defer dist.Destroy()
	bo := opts.Device
	bo.CPUDevices, bo.Replicas = 0, 1
	if bo.Target == "" || bo.Target == backend.CPU {
		bo.CPUDevices = 1
	}
	bo, err := withJobKeyValue(bo)
	if err != nil {
		return err
	}
	b, err := backend.Open(ctx, bo)
	if err != nil {
		return err
	}
	e := xla.NewEngine(b)
	defer e.Close()
	if err := shareProgramsInJob(e); err != nil {
		return err
	}
	g := dist.Current()
	if err := e.Device(0).ManualSeed(xla.DefaultSeed(g.Rank())); err != nil {
		return err
	}
	err = fn(ctx, Worker{Rank: g.Rank(), WorldSize: g.WorldSize(), LocalRank: g.LocalRank(), Device: e.Device(0)})
	if err != nil {
		return fmt.Errorf("rank %d: %w", g.Rank(), err)
	}
	return nil
}
