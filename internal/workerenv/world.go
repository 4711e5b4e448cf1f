package workerenv

import (
	"fmt"
	"strconv"
	"strings"
)

// Unset marks an integer field of World that the environment does not give.
const Unset = -1

// World is a worker's place in a job as its environment gives it. Integer
// fields are Unset when absent; Environ writes only the fields that are set.
type World struct {
	// Rank, WorldSize, LocalRank and LocalWorldSize are torchrun's.
	Rank, WorldSize, LocalRank, LocalWorldSize int
	// OpenMPI is what Open MPI's mpirun set (Placed fills torch's
	// fields from it).
	OpenMPI OpenMPIWorld
	// NodeRank is the node's rank (torchrun's GROUP_RANK); RoleRank,
	// RoleName and RoleWorldSize are torchrun's role variables.
	NodeRank, RoleRank, RoleWorldSize int
	RoleName                          string
	MasterAddr, MasterPort            string
	RestartCount, MaxRestarts         int
	RunID                             string
	AgentStore                        bool
	SpawnChild                        bool
	Transport                         string
	BindCPUs                          bool
	CompileOnly                       bool
	// Timeout is the process group's timeout as given (ddprun --timeout).
	Timeout string
	// Threads is OMP_NUM_THREADS as given (a count, or OpenMP's nested
	// list); empty: the runtime's default.
	Threads string
}

// OpenMPIWorld is a process's place as Open MPI's mpirun gives it.
type OpenMPIWorld struct {
	Rank, WorldSize, LocalRank, LocalWorldSize int
	// JobID is the same in every process of one mpirun job.
	JobID string
}

// Empty is a World with nothing set, to fill before Environ.
func Empty() World {
	return World{Rank: Unset, WorldSize: Unset, LocalRank: Unset, LocalWorldSize: Unset, NodeRank: Unset,
		RoleRank: Unset, RoleWorldSize: Unset, RestartCount: Unset, MaxRestarts: Unset,
		OpenMPI: OpenMPIWorld{Rank: Unset, WorldSize: Unset, LocalRank: Unset, LocalWorldSize: Unset}}
}

// Parse reads the worker environment through getenv. A variable that is
// set but not a whole number is an error naming it; an empty one is unset.
func Parse(getenv func(string) string) (World, error) {
	w := Empty()
	ints := []struct {
		dst  *int
		name string
	}{
		{&w.Rank, Rank}, {&w.WorldSize, WorldSize}, {&w.LocalRank, LocalRank}, {&w.LocalWorldSize, LocalWorldSize},
		{&w.OpenMPI.Rank, OpenMPIRank}, {&w.OpenMPI.WorldSize, OpenMPIWorldSize},
		{&w.OpenMPI.LocalRank, OpenMPILocalRank}, {&w.OpenMPI.LocalWorldSize, OpenMPILocalWorldSize},
		{&w.NodeRank, NodeRank}, {&w.RoleRank, RoleRank}, {&w.RoleWorldSize, RoleWorldSize},
		{&w.RestartCount, RestartCount}, {&w.MaxRestarts, MaxRestarts},
	}
	for _, f := range ints {
		n, ok, err := integer(getenv, f.name)
		if err != nil {
			return World{}, err
		}
		if ok {
			*f.dst = n
		}
	}
	w.OpenMPI.JobID = getenv(OpenMPIJobID)
	w.RoleName = getenv(RoleName)
	w.MasterAddr, w.MasterPort = getenv(MasterAddr), getenv(MasterPort)
	w.RunID = getenv(RunID)
	w.AgentStore = getenv(AgentStore) == "True"
	w.SpawnChild = getenv(SpawnChild) == "1"
	w.Transport = getenv(Transport)
	w.BindCPUs = getenv(BindCPUs) == "1"
	w.CompileOnly = getenv(CompileOnly) == "1"
	w.Timeout = getenv(Timeout)
	w.Threads = getenv(Threads)
	return w, nil
}

// Placed is w with each of torch's four placement fields that is unset
// taken from Open MPI's: under mpirun every process is a worker itself.
func (w World) Placed() World {
	for _, f := range []struct{ dst, from *int }{{&w.Rank, &w.OpenMPI.Rank}, {&w.WorldSize, &w.OpenMPI.WorldSize},
		{&w.LocalRank, &w.OpenMPI.LocalRank}, {&w.LocalWorldSize, &w.OpenMPI.LocalWorldSize}} {
		if *f.dst == Unset {
			*f.dst = *f.from
		}
	}
	return w
}

// integer reads variable name as an int (ok false when unset or empty).
func integer(getenv func(string) string, name string) (n int, ok bool, err error) {
	v := getenv(name)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, true, fmt.Errorf("$%s=%q is not an integer", name, v)
	}
	if n < 0 {
		return 0, true, fmt.Errorf("$%s=%q: want a whole number from 0", name, v)
	}
	return n, true, nil
}

// Launched reports whether a launcher placed this process: a rank or a
// world size is set (torchrun's or Open MPI's).
func (w World) Launched() bool {
	p := w.Placed()
	return p.Rank != Unset || p.WorldSize != Unset
}

// IsRankZero reports whether this process is rank 0 of its job, or was
// started alone (no rank set).
func (w World) IsRankZero() bool {
	p := w.Placed()
	return p.Rank == Unset || p.Rank == 0
}

// JobKey names the job this process belongs to: the same in each of its
// processes and different for two jobs that run at once. A launched job
// is its rendezvous address (MASTER_ADDR:MASTER_PORT, which one job binds
// at a time) and run id, or Open MPI's job id; a process started alone is
// itself (host and pid).
func (w World) JobKey(host string, pid int) string {
	switch {
	case w.MasterAddr != "" && w.MasterPort != "" && w.Launched():
		return fmt.Sprintf("job at %s:%s (run id %q)", w.MasterAddr, w.MasterPort, w.RunID)
	case w.OpenMPI.JobID != "":
		return fmt.Sprintf("mpirun job %s", w.OpenMPI.JobID)
	}
	return fmt.Sprintf("process %d on %s", pid, host)
}

// SingleHost reports whether an mpirun job runs all its processes on
// this host (its world is its local world).
func (o OpenMPIWorld) SingleHost() bool {
	return o.JobID != "" && o.WorldSize != Unset && o.WorldSize == o.LocalWorldSize
}

// Environ renders the fields that are set as NAME=value entries for a
// child's environment, in a fixed order.
func (w World) Environ() []string {
	var env []string
	num := func(name string, v int) {
		if v != Unset {
			env = append(env, name+"="+strconv.Itoa(v))
		}
	}
	str := func(name, v string) {
		if v != "" {
			env = append(env, name+"="+v)
		}
	}
	flag := func(name string, on bool) {
		if on {
			env = append(env, name+"=1")
		}
	}
	num(Rank, w.Rank)
	num(LocalRank, w.LocalRank)
	num(NodeRank, w.NodeRank)
	num(RoleRank, w.RoleRank)
	str(RoleName, w.RoleName)
	num(WorldSize, w.WorldSize)
	num(LocalWorldSize, w.LocalWorldSize)
	num(RoleWorldSize, w.RoleWorldSize)
	str(MasterAddr, w.MasterAddr)
	str(MasterPort, w.MasterPort)
	num(RestartCount, w.RestartCount)
	num(MaxRestarts, w.MaxRestarts)
	str(RunID, w.RunID)
	if w.AgentStore {
		env = append(env, AgentStore+"=True")
	}
	flag(SpawnChild, w.SpawnChild)
	str(Transport, w.Transport)
	flag(BindCPUs, w.BindCPUs)
	flag(CompileOnly, w.CompileOnly)
	str(Timeout, w.Timeout)
	str(Threads, w.Threads)
	return env
}
