package backend

import (
	"context"
	"fmt"
	"os"

	"github.com/xladdp/xladdp/internal/knobs"
)

// MaxCPUDevices bounds cpu_device_count. The stock plugin aborts the whole
// process on a negative count and takes over a second to create 4096 devices.
const MaxCPUDevices = knobs.MaxCPUDevices

// Environment variables for the CPU device count: ours first, then
// torch-xla's CPU_NUM_DEVICES.
const (
	EnvCPUDevices         = "XLADDP_CPU_DEVICES"
	EnvTorchXLACPUDevices = "CPU_NUM_DEVICES"
)

// EnvCPUExecution picks the CPU client's execution mode: sync or async.
const EnvCPUExecution = "XLADDP_CPU_EXECUTION"

// CPUExecution is how the CPU plugin runs a program.
type CPUExecution string

const (
	// CPUSync runs a program on the thread that executes it: the execute
	// call returns when the program finished. The default (see Options).
	CPUSync CPUExecution = "sync"
	// CPUAsync hands a program to the plugin's worker threads: the execute
	// call returns at once and the host traces the next step meanwhile, as
	// accelerator plugins always do.
	CPUAsync CPUExecution = "async"
)

// Options configures Open. The zero value opens one CPU device with the
// plugin found by the default search.
type Options struct {
	// Target is a registered target (cpu, cuda, ...). Empty: $XLADDP_DEVICE, else
	// $PJRT_DEVICE, else cpu.
	Target Target
	// PluginPath is the PJRT plugin to load. Empty: $XLADDP_PJRT_PLUGIN,
	// else the target's default search (see Open).
	PluginPath string
	// CPUDevices is the number of virtual CPU devices (PJRT's
	// cpu_device_count); cpu only. Zero: $XLADDP_CPU_DEVICES, else
	// $CPU_NUM_DEVICES, else Replicas, else 1.
	CPUDevices int
	// Replicas is how many local replicas the caller will run. It sets the
	// default CPU device count, and Open fails if the target has fewer
	// addressable devices.
	Replicas int
	// CPUExecution is the CPU client's execution mode; cpu only. Empty:
	// $XLADDP_CPU_EXECUTION, else sync. Synchronous execution is the
	// default because on the CPU the host and the program share the cores,
	// so overlapping them gains nothing, while handing every program to a
	// worker thread costs a thread wake-up and malloc lock contention per
	// step: the toy step runs 2x faster and the CNN step as fast
	// (docs/BENCHMARKS.md).
	CPUExecution CPUExecution
	// Deterministic compiles the programs deterministic: on the CPU
	// target so that they sum the same way whatever the process's device
	// count and threads, on cuda with XLA's deterministic kernels
	// (deterministicFlags); what ddp.Deterministic needs. Else
	// $XLADDP_DETERMINISTIC. The process's first backend decides.
	Deterministic bool
	// KeyValue is the job's key-value store, given to the plugin as
	// PJRT_Client_Create's key-value callbacks (get, put, try-get) for its
	// distributed runtime (a CUDA plugin forms NCCL communicators across
	// processes through it). Nil: a process alone, no callbacks. ddp
	// gives every process of a job its store, scoped by job and attempt.
	KeyValue KeyValueStore
}

// KeyValueStore is a job's store as a plugin's distributed runtime uses
// it: Get waits for a key (until ctx ends), TryGet does not (found false:
// no such key), Put sets one. It must be safe for concurrent use: the
// plugin calls from its own threads.
type KeyValueStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	TryGet(ctx context.Context, key string) (value []byte, found bool, err error)
	Put(ctx context.Context, key string, value []byte) error
}

// cpuExecution resolves the CPU client's execution mode.
func cpuExecution(opts Options) (CPUExecution, error) {
	mode, source := opts.CPUExecution, "Options.CPUExecution"
	if mode == "" {
		v, _ := os.LookupEnv(EnvCPUExecution)
		m, err := knobs.CPUExecution(v)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		mode, source = CPUExecution(m), "$"+EnvCPUExecution
	}
	switch mode {
	case "":
		return CPUSync, nil
	case CPUSync, CPUAsync:
		return mode, nil
	}
	return "", fmt.Errorf("%w: %s=%q: use %q or %q", ErrBadOption, source, string(mode), CPUSync, CPUAsync)
}

// cpuDeviceCount resolves how many CPU devices to create.
func cpuDeviceCount(opts Options) (int, error) {
	if opts.CPUDevices != 0 {
		return checkDeviceCount(opts.CPUDevices, "Options.CPUDevices")
	}
	for _, name := range []string{EnvCPUDevices, EnvTorchXLACPUDevices} {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			continue
		}
		n, err := knobs.CPUDevices(name, v)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrBadDeviceCount, err)
		}
		return checkDeviceCount(n, "$"+name)
	}
	if opts.Replicas > 0 {
		return checkDeviceCount(opts.Replicas, "Options.Replicas")
	}
	return 1, nil
}

func checkDeviceCount(n int, source string) (int, error) {
	if n < 1 || n > MaxCPUDevices {
		return 0, fmt.Errorf("%w: %s=%d: the CPU device count must be from 1 to %d",
			ErrBadDeviceCount, source, n, MaxCPUDevices)
	}
	return n, nil
}
