package trn

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// Mode is how the training processes were started.
type Mode int

const (
	// SpawnOneProcess: ddp.Spawn's default, one process drives every
	// local NeuronCore.
	SpawnOneProcess Mode = iota + 1
	// SpawnProcesses: ddp.Spawn with Processes, one process per core
	// (torch-xla's xmp.spawn under PJRT).
	SpawnProcesses
	// Run: ddprun or torchrun, one process per core, possibly on several
	// nodes.
	Run
)

// String names the mode as the launchers do.
func (m Mode) String() string {
	switch m {
	case SpawnOneProcess:
		return "spawn (one process)"
	case SpawnProcesses:
		return "spawn (a process per core)"
	case Run:
		return "run (ddprun/torchrun)"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Job is what the environment depends on.
type Job struct {
	Mode                      Mode
	Rank, WorldSize           int
	LocalRank, LocalWorldSize int
	// LocalDevices is the NeuronCore count one process drives
	// (SpawnOneProcess) or the processes per node (SpawnProcesses).
	LocalDevices int
	// MasterAddr is the address of node 0 (default localhost).
	MasterAddr string
	// MultiNode: the job spans nodes, which talk over EFA.
	MultiNode bool
	// WorldSizeVariable selects NEURON_PJRT_WORLD_SIZE (Neuron SDK 2.18 and
	// later) over the per-process list NEURON_PJRT_PROCESSES_NUM_DEVICES.
	WorldSizeVariable bool
}

// RootCommPort is the port of the Neuron runtime's root communicator on
// node 0, as torch-xla sets it.
const RootCommPort = 62182

// Environment returns the variables Neuron's runtime and PJRT plugin need
// for job, computed as torch-xla's torch_xla/_internal/neuron.py
// (configure_pjrt_environment, num_local_processes, initialize_env) and
// neuron_utils.py (remap_visible_cores) compute them. A variable the user
// set (getenv returns it non-empty) is never overridden; it may be read
// (a NEURON_RT_VISIBLE_CORES range is split per local rank).
func Environment(job Job, getenv func(string) string) (map[string]string, error) {
	env := map[string]string{}
	set := func(k, v string) {
		if getenv(k) == "" {
			env[k] = v
		}
	}
	set(EnvRootCommID, rootCommID(cmpOr(job.MasterAddr, getenv(workerenv.MasterAddr), "localhost")))
	set("ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB", "50")
	// bf16 compute (nn.SetComputeDType, and neuronx-cc's default auto-cast
	// of fp32 matmuls) rounds stochastically on the device, as Neuron
	// recommends for bf16 training: round-to-nearest drops small updates
	// and biases long sums. A user's 0 is kept.
	set(EnvStochasticRounding, "1")
	switch job.Mode {
	case SpawnOneProcess:
		set(EnvCoreNumDevices, strconv.Itoa(job.LocalDevices))
		set(EnvProcessesNumDevices, strconv.Itoa(job.LocalDevices))
		set(EnvProcessIndex, "0")
	case SpawnProcesses:
		set(EnvCoreNumDevices, strconv.Itoa(job.LocalDevices))
		set(EnvProcessesNumDevices, ones(job.LocalDevices))
		env[EnvProcessIndex] = strconv.Itoa(job.LocalRank)
		core, err := visibleCore(job.LocalRank, job.LocalWorldSize, getenv(EnvVisibleCores))
		if err != nil {
			return nil, err
		}
		env[EnvVisibleCores] = core
	case Run:
		if getenv(EnvProcessesNumDevices) == "" && getenv(EnvWorldSize) == "" {
			if job.WorldSizeVariable {
				env[EnvWorldSize] = strconv.Itoa(job.WorldSize)
			} else {
				env[EnvProcessesNumDevices] = ones(job.WorldSize)
			}
			set(EnvLocalProcessCount, strconv.Itoa(job.LocalWorldSize))
		}
		core, err := visibleCore(job.LocalRank, job.LocalWorldSize, getenv(EnvVisibleCores))
		if err != nil {
			return nil, err
		}
		env[EnvVisibleCores] = core
		env[EnvProcessIndex] = strconv.Itoa(job.Rank)
		env[EnvLocalProcessRank] = strconv.Itoa(job.LocalRank)
	default:
		return nil, fmt.Errorf("neuron: unknown launch mode %d", job.Mode)
	}
	if job.MultiNode {
		set(EnvFIProvider, "efa")
		set(EnvFIEFAUseDeviceRDMA, "1")
		set(EnvFIEFAForkSafe, "1")
	}
	return env, nil
}

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// ones is "1,1,...,1", n entries: one NeuronCore per process.
func ones(n int) string {
	return strings.TrimSuffix(strings.Repeat("1,", max(n, 0)), ",")
}

// rootCommID is addr:62182, an IPv6 address in brackets.
func rootCommID(addr string) string {
	if strings.Count(addr, ":") >= 2 {
		if !strings.HasPrefix(addr, "[") {
			addr = "[" + addr
		}
		if !strings.HasSuffix(addr, "]") {
			addr += "]"
		}
	}
	return addr + ":" + strconv.Itoa(RootCommPort)
}

// visibleCore is the NeuronCore local rank lr uses: lr itself, or the
// lr-th core of the user's NEURON_RT_VISIBLE_CORES list, which must then
// name exactly one core per local process.
func visibleCore(lr, lws int, userCores string) (string, error) {
	if lws < 1 {
		return "", errors.New("neuron: the local world size must be at least 1")
	}
	if userCores == "" {
		return strconv.Itoa(lr), nil
	}
	cores, err := ParseCoreList(userCores)
	if err != nil {
		return "", err
	}
	switch {
	case len(cores) <= 1 && lws == 1:
		return userCores, nil // a single-core workload keeps its choice
	case len(cores) != lws:
		return "", fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q names %d cores for %d local processes: give one core per process",
			userCores, len(cores), lws)
	case lr >= len(cores):
		return "", fmt.Errorf("neuron: local rank %d has no core in NEURON_RT_VISIBLE_CORES=%q", lr, userCores)
	}
	return strconv.Itoa(cores[lr]), nil
}

// ParseCoreList reads a NEURON_RT_VISIBLE_CORES value: comma-separated
// cores or inclusive ranges ("0-3,8"), mutually exclusive.
func ParseCoreList(s string) ([]int, error) {
	var cores []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, ranged := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if ranged {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b-a > 4096 {
			return nil, fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q: %q is not a core or a range LOW-HIGH", s, part)
		}
		for c := a; c <= b; c++ {
			if slices.Contains(cores, c) {
				return nil, fmt.Errorf("neuron: NEURON_RT_VISIBLE_CORES=%q names core %d twice: the ranges must not overlap", s, c)
			}
			cores = append(cores, c)
		}
	}
	return cores, nil
}
