package workerenv

// The variables, named as torch.distributed (torchrun) and Open MPI's
// mpirun name them, and xladdp's own.
const (
	Rank           = "RANK"
	WorldSize      = "WORLD_SIZE"
	LocalRank      = "LOCAL_RANK"
	LocalWorldSize = "LOCAL_WORLD_SIZE"
	NodeRank       = "GROUP_RANK"
	RoleRank       = "ROLE_RANK"
	RoleName       = "ROLE_NAME"
	RoleWorldSize  = "ROLE_WORLD_SIZE"
	MasterAddr     = "MASTER_ADDR"
	MasterPort     = "MASTER_PORT"
	RestartCount   = "TORCHELASTIC_RESTART_COUNT"
	MaxRestarts    = "TORCHELASTIC_MAX_RESTARTS"
	RunID          = "TORCHELASTIC_RUN_ID"
	// AgentStore is "True" when torchrun's agent (torch >= 2) hosts the
	// workers' store on MASTER_PORT.
	AgentStore = "TORCHELASTIC_USE_AGENT_STORE"
	// Threads is the OpenMP thread count, 1 per worker when several share
	// a node (as torchrun sets it).
	Threads = "OMP_NUM_THREADS"

	// OpenMPIRank and the others are what Open MPI's mpirun sets in each
	// process; OpenMPIJobID is the same in every process of one job.
	OpenMPIRank           = "OMPI_COMM_WORLD_RANK"
	OpenMPIWorldSize      = "OMPI_COMM_WORLD_SIZE"
	OpenMPILocalRank      = "OMPI_COMM_WORLD_LOCAL_RANK"
	OpenMPILocalWorldSize = "OMPI_COMM_WORLD_LOCAL_SIZE"
	OpenMPIJobID          = "OMPI_MCA_ess_base_jobid"

	// SpawnChild ("1") marks a process ddp.Spawn started in its process mode.
	SpawnChild = "XLADDP_SPAWN_CHILD"
	// Transport is the process group's transport (tcp, mpi).
	Transport = "XLADDP_BACKEND"
	// BindCPUs ("1") gives each rank on a host its own share of the CPUs.
	BindCPUs = "XLADDP_BIND_CPUS"
	// CompileOnly ("1") makes every step compile into the caches without
	// executing (ddprun --compile_only).
	CompileOnly = "XLADDP_COMPILE_ONLY"
	// FlightDir is where each rank's process group writes its flight
	// record when it fails or gets SIGUSR1.
	FlightDir = "XLADDP_FLIGHT_DIR"
	// RegroupDir is the directory a worker's agent writes its next
	// assignment to after a peer's loss or a step held for a joining
	// node (ddprun sets it unless --restart_on_peer_loss; WriteRegroup),
	// and where the workers offer to hold a step and the agent asks for
	// one (join.go).
	RegroupDir = "XLADDP_REGROUP_DIR"
	// Timeout bounds the rendezvous and each collective of the process
	// group (a Go duration, "90s", or seconds; ddprun --timeout).
	Timeout = "XLADDP_TIMEOUT"
)

// ExitPreempted is the exit status of a worker, and of ddprun, that
// stopped on SIGTERM after committing a checkpoint: preempted, and
// resumable by running the job again (EX_TEMPFAIL, "try again later").
const ExitPreempted = 75

// ErrPreempted is the error of a job that stopped on SIGTERM with its
// checkpoint committed; a command that returns it exits ExitPreempted
// (its ExitStatus).
var ErrPreempted error = preempted{}

type preempted struct{}

func (preempted) Error() string {
	return "preempted: the checkpoint is committed; run the job again to resume"
}

// ExitStatus is the status a command ending with this error exits with.
func (preempted) ExitStatus() int { return ExitPreempted }

// PerRank are the variables that differ between the workers of one job:
// an mpirun launch strips them, since MPI gives the ranks and stale ones
// would contradict it.
func PerRank() []string {
	return []string{Rank, WorldSize, LocalRank, LocalWorldSize, NodeRank, RoleRank, Transport}
}

// Names are every variable a launcher of ours writes to place a process
// in a job, for a test or a launcher to clear before it sets its own.
// Open MPI's are not among them: they are mpirun's to set, and an empty
// OMPI_MCA_* given to mpirun is a setting.
func Names() []string {
	return []string{Rank, WorldSize, LocalRank, LocalWorldSize, NodeRank, RoleRank, RoleName, RoleWorldSize,
		MasterAddr, MasterPort, RestartCount, MaxRestarts, RunID, AgentStore,
		SpawnChild, Transport, BindCPUs, CompileOnly, Timeout}
}

// Cleared is Names as "NAME=" entries, appended to a child's environment
// so none of the parent's placement leaks into it.
func Cleared() []string {
	var out []string
	for _, n := range Names() {
		out = append(out, n+"=")
	}
	return out
}
