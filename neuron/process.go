package neuron

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/neuron/trn"
)

// JobFromEnv reads the launch mode and world from the process
// environment, as torch-xla decides between xmp.spawn and torchrun:
// RANK and WORLD_SIZE with TORCHELASTIC_RUN_ID (torchrun, ddprun) or
// MASTER_ADDR (an mpirun or hand-made launch) mean Run; XLADDP_SPAWN_CHILD
// means one of ddp.Spawn's processes; else one process drives the local
// cores ($NEURON_NUM_DEVICES or $NEURONCORE_NUM_DEVICES of them).
func JobFromEnv(getenv func(string) string) (trn.Job, error) {
	num := func(name string, def int) (int, error) {
		v := getenv(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("neuron: $%s=%q is not a count", name, v)
		}
		return n, nil
	}
	w, err := workerenv.Parse(getenv)
	if err != nil {
		return trn.Job{}, fmt.Errorf("neuron: %w", err)
	}
	orDefault := func(v, def int) int {
		if v == workerenv.Unset {
			return def
		}
		return v
	}
	j := trn.Job{Rank: orDefault(w.Rank, 0), WorldSize: orDefault(w.WorldSize, 1),
		LocalRank: orDefault(w.LocalRank, 0), LocalWorldSize: orDefault(w.LocalWorldSize, 1)}
	devices, err := num(trn.EnvCoreNumDevices, 0)
	if err != nil {
		return trn.Job{}, err
	}
	if devices == 0 {
		if devices, err = num(trn.EnvNumDevices, 1); err != nil {
			return trn.Job{}, err
		}
	}
	j.LocalDevices = max(devices, 1)
	j.MasterAddr = w.MasterAddr
	j.MultiNode = j.WorldSize > j.LocalWorldSize
	j.WorldSizeVariable = getenv(trn.EnvWorldSizeVariable) == "1"
	switch {
	case w.SpawnChild:
		j.Mode = trn.SpawnProcesses
		j.LocalDevices = j.LocalWorldSize
	case w.Rank != workerenv.Unset && (w.RunID != "" || w.MasterAddr != ""):
		j.Mode = trn.Run
	default:
		j.Mode = trn.SpawnOneProcess
	}
	return j, nil
}

// applyEnvironment sets the variables Environment computes for this
// process's job, before the plugin reads them. replicas (Open's, from
// ddp.Spawn's device count) is the core count of a one-process job that
// $NEURONCORE_NUM_DEVICES and $NEURON_NUM_DEVICES leave open.
func applyEnvironment(replicas int) error {
	job, err := JobFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	job = withReplicas(job, replicas, os.Getenv)
	inst, err := validateMachine(job, os.Getenv, os.ReadFile)
	if err != nil {
		return err
	}
	env, err := trn.Environment(job, os.Getenv)
	if err != nil {
		return err
	}
	maps.Copy(env, logicalCoreEnvironment(inst, os.Getenv))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := os.Setenv(k, env[k]); err != nil {
			return err
		}
		slog.Debug("neuron: set for the plugin", "variable", k, "value", env[k], "mode", job.Mode.String(), "why", why(k))
	}
	if dir := compileCacheDir(os.Getenv); dir != "" {
		if w := CacheWarning(dir); w != "" {
			slog.Warn(w)
		}
	}
	return nil
}

// validateMachine checks job against this machine's instance type, when
// it is a known Trainium instance, before the runtime fails less clearly,
// and returns that instance (the zero Instance on any other machine).
func validateMachine(job trn.Job, getenv func(string) string, readFile func(string) ([]byte, error)) (trn.Instance, error) {
	inst, ok, err := trn.DetectInstance(getenv, readFile)
	if err != nil || !ok {
		return trn.Instance{}, err
	}
	return inst, trn.Validate(inst, layoutOf(job, getenv(trn.EnvVisibleCores)))
}

// logicalCoreEnvironment is what a Trainium2 process needs of the logical
// NeuronCore setting: the runtime's (NEURON_LOGICAL_NC_CONFIG, its
// default written out) and the same setting for the compiler, which
// must agree with it. Nothing on Trainium1 or elsewhere.
func logicalCoreEnvironment(inst trn.Instance, getenv func(string) string) map[string]string {
	if inst.Family != "trn2" {
		return nil
	}
	env := map[string]string{}
	if getenv(trn.EnvLogicalNCConfig) == "" {
		env[trn.EnvLogicalNCConfig] = strconv.Itoa(inst.LNC)
	}
	if flags := trn.CompilerFlags(inst, getenv(trn.EnvCCFlags)); flags != getenv(trn.EnvCCFlags) {
		env[trn.EnvCCFlags] = flags
	}
	return env
}

// layoutOf is the per-node shape of job: one process driving its cores,
// or one core per process on each of the nodes.
func layoutOf(job trn.Job, visibleCores string) trn.Layout {
	if job.Mode == trn.SpawnOneProcess {
		return trn.Layout{ProcessesPerNode: 1, CoresPerProcess: job.LocalDevices, Nodes: 1, VisibleCores: visibleCores}
	}
	lws := max(job.LocalWorldSize, 1)
	return trn.Layout{ProcessesPerNode: lws, CoresPerProcess: 1, Nodes: max((job.WorldSize+lws-1)/lws, 1), VisibleCores: visibleCores}
}

// why says which of torch-xla's rules sets a variable, for the debug log.
func why(name string) string {
	switch name {
	case trn.EnvRootCommID:
		return "the runtime's root communicator on node 0 (MASTER_ADDR:62182)"
	case trn.EnvVisibleCores:
		return "this process's NeuronCore: its local rank, or its share of your range"
	case trn.EnvProcessIndex:
		return "this process's index among the plugin's processes"
	case trn.EnvProcessesNumDevices, trn.EnvWorldSize:
		return "the NeuronCores of every process of the job"
	case trn.EnvLocalProcessCount, trn.EnvLocalProcessRank:
		return "the processes on this node and this one's place among them"
	case trn.EnvCoreNumDevices:
		return "the NeuronCores this node's job drives"
	case trn.EnvFIProvider, trn.EnvFIEFAUseDeviceRDMA, trn.EnvFIEFAForkSafe:
		return "EFA for a job of several nodes"
	case trn.EnvLogicalNCConfig, trn.EnvCCFlags:
		return "Trainium2's logical NeuronCore setting, the same for the runtime and the compiler"
	}
	return "torch-xla sets it"
}

// compileCacheDir is where neuronx-cc caches: NEURON_COMPILE_CACHE_URL,
// else --cache_dir in NEURON_CC_FLAGS, else its default; "" for an S3 URL.
func compileCacheDir(getenv func(string) string) string {
	dir := getenv(trn.EnvCompileCacheURL)
	if dir == "" {
		for _, f := range strings.Fields(getenv(trn.EnvCCFlags)) {
			if v, ok := strings.CutPrefix(f, "--cache_dir="); ok {
				dir = v
			}
		}
	}
	if dir == "" {
		dir = DefaultCompileCache
	}
	if strings.Contains(dir, "://") {
		return ""
	}
	return dir
}

// DefaultCompileCache is neuronx-cc's cache when nothing names one.
const DefaultCompileCache = "/var/tmp/neuron-compile-cache"

// Configure sets NEURON_CC_FLAGS and NEURON_COMPILE_CACHE_URL from o
// (CompilerEnvironment: your own flags are kept) in this process. Call it
// before opening the neuron target: the plugin reads them when it loads.
func Configure(o CompileOptions) error {
	env, err := CompilerEnvironment(o, os.Getenv)
	if err != nil {
		return err
	}
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

// withReplicas gives a one-process job the caller's replica count as its
// core count when the environment names none.
func withReplicas(job trn.Job, replicas int, getenv func(string) string) trn.Job {
	if job.Mode == trn.SpawnOneProcess && replicas > 0 && getenv(trn.EnvCoreNumDevices) == "" && getenv(trn.EnvNumDevices) == "" {
		job.LocalDevices = replicas
	}
	return job
}
