package neuron

import (
	"fmt"
	"os"
	"strconv"
)

// JobFromEnv reads the launch mode and world from the process
// environment, as torch-xla decides between xmp.spawn and torchrun:
// RANK and WORLD_SIZE with TORCHELASTIC_RUN_ID (torchrun, ddprun) or
// MASTER_ADDR (an mpirun or hand-made launch) mean Run; XLADDP_SPAWN_CHILD
// means one of ddp.Spawn's processes; else one process drives the local
// cores ($NEURON_NUM_DEVICES or $NEURONCORE_NUM_DEVICES of them).
func JobFromEnv(getenv func(string) string) (Job, error) {
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
	var j Job
	var err error
	fields := []struct {
		dst  *int
		name string
		def  int
	}{{&j.Rank, "RANK", 0}, {&j.WorldSize, "WORLD_SIZE", 1}, {&j.LocalRank, "LOCAL_RANK", 0}, {&j.LocalWorldSize, "LOCAL_WORLD_SIZE", 1}}
	for _, f := range fields {
		if *f.dst, err = num(f.name, f.def); err != nil {
			return Job{}, err
		}
	}
	devices, err := num("NEURONCORE_NUM_DEVICES", 0)
	if err != nil {
		return Job{}, err
	}
	if devices == 0 {
		if devices, err = num("NEURON_NUM_DEVICES", 1); err != nil {
			return Job{}, err
		}
	}
	j.LocalDevices = max(devices, 1)
	j.MasterAddr = getenv("MASTER_ADDR")
	j.MultiNode = j.WorldSize > j.LocalWorldSize
	j.WorldSizeVariable = getenv("XLADDP_NEURON_WORLD_SIZE_VARIABLE") == "1"
	switch {
	case getenv("XLADDP_SPAWN_CHILD") == "1":
		j.Mode = SpawnProcesses
		j.LocalDevices = j.LocalWorldSize
	case getenv("RANK") != "" && (getenv("TORCHELASTIC_RUN_ID") != "" || getenv("MASTER_ADDR") != ""):
		j.Mode = Run
	default:
		j.Mode = SpawnOneProcess
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
	env, err := Environment(job, os.Getenv)
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
func withReplicas(job Job, replicas int, getenv func(string) string) Job {
	if job.Mode == SpawnOneProcess && replicas > 0 && getenv("NEURONCORE_NUM_DEVICES") == "" && getenv("NEURON_NUM_DEVICES") == "" {
		job.LocalDevices = replicas
	}
	return job
}
