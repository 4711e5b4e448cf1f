package knobs

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/internal/readlimit"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// The variables whose readers parse them here.
const (
	EnvDevice         = "XLADDP_DEVICE"
	EnvCPUDevices     = "XLADDP_CPU_DEVICES"
	EnvCPUExecution   = "XLADDP_CPU_EXECUTION"
	EnvCPUKernels     = "XLADDP_CPU_KERNELS"
	EnvDeterministic  = "XLADDP_DETERMINISTIC"
	EnvCompileOnly    = workerenv.CompileOnly
	EnvSharePrograms  = "XLADDP_SHARE_PROGRAMS"
	EnvZeroBuddies    = "XLADDP_ZERO_BUDDIES"
	EnvBackend        = workerenv.Transport
	EnvTimeout        = workerenv.Timeout
	EnvFlightSize     = "XLADDP_FLIGHT_SIZE"
	EnvShmMiB         = "XLADDP_SHM_MIB"
	EnvMPIThreads     = "XLADDP_MPI_THREADS"
	EnvMPIReduceOrder = "XLADDP_MPI_REDUCE_ORDER"
)

// Targets are the device targets' names and aliases a program of ours
// links (the targets package's test holds the registry to it).
var Targets = []string{"cpu", "cuda", "gpu", "neuron"}

// Flight record sizes ($XLADDP_FLIGHT_SIZE).
const (
	DefaultFlightSize = 2048
	MaxFlightSize     = 1 << 20
)

// Knob is one variable a user may set.
type Knob struct {
	Name, Default, Means string
	// Check refuses a value its reader would refuse, or would read as
	// something other than it says (a typo of "off" read as on), with
	// the reader's own parser; nil: any value is taken as given.
	Check func(v string) error
}

// Table is every XLADDP_* variable a user may set, in the order
// docs/architecture.md lists them.
func Table() []Knob { return append(engineKnobs(), groupKnobs()...) }

// engineKnobs are the rows of the device target and the engine.
func engineKnobs() []Knob {
	return []Knob{
		{EnvDevice, "cpu", "the target: cpu, cuda (gpu), neuron; `PJRT_DEVICE` is read when unset", device},
		{"XLADDP_PJRT_PLUGIN", "the search", "a PJRT plugin file to load instead of searching", readlimit.CheckRegular},
		{"XLADDP_PYTHON", "python3", "the Python whose site-packages are searched for pip-installed plugins", nil},
		{EnvCPUDevices, "1 (spawn: `--cpu-devices`)", "the CPU client's device count (`CPU_NUM_DEVICES` also read)",
			func(v string) error { _, err := CPUDevices(EnvCPUDevices, v); return err }},
		{EnvCPUExecution, "sync", "the CPU client's execution: sync or async", discard(CPUExecution)},
		{EnvCPUKernels, "onednn where libdnnl.so.2 loads, else xla (said once)", "what runs the cpu target's convolutions: " +
			"`onednn` (oneDNN custom calls inside the program; an error where it does not load) or `xla` (XLA's own kernels)",
			discard(CPUKernels)},
		{"XLADDP_ONEDNN_LIBRARY", "libdnnl.so.2", "the oneDNN 2.x library the cpu target loads (a soname or a path)", nil},
		{EnvDeterministic, "0", "`1`: programs compiled deterministic, what `ddp.Deterministic` needs (`backend.Options.Deterministic`, " +
			"set by `ddp.Run` for `--deterministic`): on the cpu target they sum alike at any device and thread count " +
			"(reductions out of YNNPACK, oneDNN's convolutions on one thread each), on cuda with " +
			"`--xla_gpu_deterministic_ops=true`; a process's first backend decides", discard(Deterministic)},
		{"XLADDP_MALLOC", "tuned", "`default` leaves glibc's allocator settings alone", words("default", "tuned")},
		{"XLADDP_CACHE_DIR", "`<user cache>/xladdp/xla`", "where compiled programs persist; `off` disables", nil},
		{"XLADDP_DEBUG", "off", "`1`: log why a program recompiled (the engine)", words("0", "1")},
		{"XLADDP_DONATE", "on", "`off`: compiled steps donate no buffer", words("on", "off")},
		{EnvSharePrograms, "on in a job of several processes", "`off`: each node compiles every program itself instead of " +
			"taking it from the job's first process to compile it (through the job's store)", discard(SharePrograms)},
		{EnvZeroBuddies, "on where a training loop keeps checkpoints in a job of several processes", "`off`: a ZeRO optimizer keeps " +
			"no copy of its shards on the next node (each step is faster; a lost node's survivors then resume from the last periodic " +
			"checkpoint)", discard(ZeroBuddies)},
		{"XLADDP_METRICS_FILE", "none", "a file each process appends its metrics to as a JSON line when its engine closes " +
			"(torch-xla's `XLA_METRICS_FILE`)", nil},
	}
}

// groupKnobs are the rows of the process group, the launcher and the
// programs, after the engine's.
func groupKnobs() []Knob {
	return []Knob{
		{EnvCompileOnly, "off", "`1`: every step compiles into the caches without executing (`ddprun --compile_only` sets it)",
			discard(CompileOnly)},
		{EnvBackend, "tcp", "the process group's transport: tcp or mpi (`--backend`)", discard(Transport)},
		{"XLADDP_DISTRIBUTED_DEBUG", "off on tcp, on on mpi", "`1`: ranks compare each collective first, a mismatch names " +
			"every rank's call; `0` turns the mpi check off", words("0", "1")},
		{EnvTimeout, "10m", "how long the process group waits for a rank in the rendezvous and in each collective before it " +
			"fails, naming it (a duration or seconds; `ddprun --timeout` sets it)", discard(Timeout)},
		{EnvFlightSize, "2048", "collectives the flight record keeps; `0` turns it off",
			func(v string) error { _, err := FlightSize(v, DefaultFlightSize, MaxFlightSize); return err }},
		{"XLADDP_FLIGHT_DIR", "ddprun's own temporary directory", "where each rank writes its flight record on a failure or SIGUSR1", nil},
		{EnvShmMiB, "128", "each rank's shared-memory slot on one host; `0` disables the path", discard(ShmMiB)},
		{"XLADDP_ADVERTISE_ADDR", "the address toward the master", "the IP other ranks use to reach this one", ip},
		{"XLADDP_STORE_TOKEN", "none", "the shared secret clients prove to the TCP store", nil},
		{workerenv.BindCPUs, "on with several ranks per node under ddprun", "`1`: each rank on its own share of the CPUs",
			words("0", "1")},
		{EnvMPIThreads, "multiple", "the thread level asked of MPI: multiple, serialized or funneled", discard(MPIThreads)},
		{EnvMPIReduceOrder, "MPI's", "`rank`: reduce in rank order on the mpi transport (the same bits as tcp)",
			discard(MPIReduceOrder)},
		{"XLADDP_NEURON_INSTANCE_TYPE", "the DMI product name", "the Trainium instance type to assume", nil},
		{"XLADDP_NEURON_PYTHON", "the active virtualenv's, else python3", "the Python environment with libneuronxla " +
			"(its site-packages are searched first; it runs only for libneuronxla 2)", nil},
		{"XLADDP_NEURON_WORLD_SIZE_VARIABLE", "off", "`1`: `NEURON_PJRT_WORLD_SIZE` instead of the per-process list",
			words("0", "1")},
		{"XLADDP_MNIST_DIR", "`~/.cache/xladdp/data/mnist`", "where MNIST is read", nil},
		{"XLADDP_PROGRAM", "`/opt/xladdp/bin/mnist`", "the binary the SageMaker entry point (`examples/sagemaker/train`) runs", nil},
		{"XLADDP_CHECKPOINT_DIR", "`/opt/ml/checkpoints`", "the SageMaker entry point's `--checkpoint-dir` " +
			"(SageMaker's `checkpoint_local_path`)", nil},
		{"XLADDP_PEERS_DIR", "`~/.cache/xladdp/peers`", "where `make bench` installs the peers", nil},
		{"XLADDP_TORCH_PYTHON", "none", "the Python with torch 2.9 a test reads the consolidated ZeRO checkpoint with", nil},
		{workerenv.SpawnChild, "set by `Spawn`", "marks a process `ddp.Spawn` started (not for users)", nil},
		{workerenv.RegroupDir, "set by ddprun (none under `--restart_on_peer_loss`)", "where ddprun hands a worker that " +
			"committed after a peer's loss, or held a step for a joining node, its next place, which it joins in the same process; " +
			"where its workers offer to hold a step and ddprun asks for one (not for users)", nil},
	}
}

// EnvPJRTDevice is torch-xla's name for the target, read when
// XLADDP_DEVICE is unset.
const EnvPJRTDevice = "PJRT_DEVICE"

// Problems checks each knob getenv sets against its reader's parser and
// returns one error per value a job would refuse or misread.
func Problems(getenv func(string) string) []error {
	var out []error
	if v := getenv(EnvPJRTDevice); v != "" && getenv(EnvDevice) == "" && device(v) != nil {
		out = append(out, fmt.Errorf("$%s=%q (read since $%s is unset): no such target: want one of %s",
			EnvPJRTDevice, v, EnvDevice, strings.Join(Targets, ", ")))
	}
	for _, k := range Table() {
		if v := getenv(k.Name); v != "" && k.Check != nil {
			if err := k.Check(v); err != nil && !strings.Contains(err.Error(), k.Name) {
				out = append(out, fmt.Errorf("$%s: %w", k.Name, err))
			} else if err != nil {
				out = append(out, err)
			}
		}
	}
	return out
}

// discard is parse as a check.
func discard[T any](parse func(string) (T, error)) func(string) error {
	return func(v string) error { _, err := parse(v); return err }
}

// device checks a target name.
func device(v string) error {
	if slices.Contains(Targets, strings.ToLower(strings.TrimSpace(v))) {
		return nil
	}
	return fmt.Errorf("$%s=%q: no such target: want one of %s", EnvDevice, v, strings.Join(Targets, ", "))
}

// ip checks an address other ranks can reach.
func ip(v string) error {
	if net.ParseIP(strings.TrimSpace(v)) == nil {
		return fmt.Errorf("%q: want an IP address of this host", v)
	}
	return nil
}

// ErrMisread is a value its reader does not refuse but reads as the
// default.
var ErrMisread = errors.New("is read as the default")

// words is the check of a variable whose reader tests for these values
// alone and reads anything else as its default: a typo is said, not
// silently read as the default.
func words(allowed ...string) func(string) error {
	return func(v string) error {
		if slices.Contains(allowed, strings.TrimSpace(v)) {
			return nil
		}
		return fmt.Errorf("%q %w: want %s", v, ErrMisread, strings.Join(allowed, " or "))
	}
}
