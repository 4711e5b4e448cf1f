package dist

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"

	"github.com/xladdp/xladdp/ddp/internal/tcp"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/knobs"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// Environment variables, named as torch.distributed names them (package
// internal/workerenv owns them all).
const (
	EnvRank           = workerenv.Rank
	EnvWorldSize      = workerenv.WorldSize
	EnvLocalRank      = workerenv.LocalRank
	EnvLocalWorldSize = workerenv.LocalWorldSize
	EnvMasterAddr     = workerenv.MasterAddr
	EnvMasterPort     = workerenv.MasterPort
	// EnvAdvertiseAddr sets the IP other ranks use to reach this one.
	EnvAdvertiseAddr = tcp.EnvAdvertiseAddr
	// EnvShmMiB sets each rank's shared-memory slot in MiB (0 disables
	// the same-host shared-memory path).
	EnvShmMiB = tcp.EnvShmMiB
	// EnvDistributedDebug turns on the collective fingerprint check ("1"; on the
	// mpi backend it is on unless "0").
	EnvDistributedDebug = "XLADDP_DISTRIBUTED_DEBUG"
	// EnvFlightDir is where a rank writes its flight record
	// (Options.FlightDir).
	EnvFlightDir = workerenv.FlightDir
	// EnvFlightSize is how many operations the flight record keeps
	// (Options.FlightSize; 0 turns the recorder off, as torch's
	// TORCH_NCCL_TRACE_BUFFER_SIZE=0 does).
	EnvFlightSize = "XLADDP_FLIGHT_SIZE"
)

// maxFlightSize bounds the flight record (each entry is about 300 bytes).
const maxFlightSize = knobs.MaxFlightSize

// Process-group transports (Options.Transport; $XLADDP_BACKEND, --backend): the
// transports registered by name.
const (
	// TransportTCP is the default: TCP between hosts, shared memory on one,
	// nothing to install.
	TransportTCP = tcp.Name
	// TransportMPI runs every operation through MPI (Open MPI), in programs
	// built with -tags mpi and started by mpirun.
	TransportMPI = "mpi"
	// EnvTimeout bounds the rendezvous and each collective (ddprun
	// --timeout sets it for its workers).
	EnvTimeout = workerenv.Timeout
	// EnvTransport chooses the transport for NewOptions ($XLADDP_BACKEND,
	// torch's word).
	EnvTransport = workerenv.Transport
)

// Options configure InitProcessGroup. Rank, WorldSize, LocalRank and
// LocalWorldSize of -1 (the zero Options are not valid: use NewOptions)
// come from the environment.
type Options struct {
	// InitMethod is "env://" (MASTER_ADDR, MASTER_PORT), "tcp://host:port"
	// or "file:///path/to/shared/file".
	InitMethod string
	Rank       int
	WorldSize  int
	// LocalRank and LocalWorldSize default to $LOCAL_RANK/$LOCAL_WORLD_SIZE,
	// else to this process's place among the ranks on its host.
	LocalRank, LocalWorldSize int
	// Timeout bounds rendezvous and each collective (default
	// $XLADDP_TIMEOUT, which ddprun --timeout sets, else DefaultTimeout).
	Timeout time.Duration
	// Token authenticates store and peer connections (default $XLADDP_STORE_TOKEN).
	Token string
	// Debug checks before each collective that all ranks call the same
	// one (default: $XLADDP_DISTRIBUTED_DEBUG=1). The mpi backend checks unless
	// $XLADDP_DISTRIBUTED_DEBUG=0: MPI itself may pair different collectives silently
	// (a broadcast with an all-reduce), where the tcp backend's frames
	// carry what each rank called.
	Debug bool
	// BindCPUs gives each rank on a host its own share of the host's CPUs
	// (default: $XLADDP_BIND_CPUS=1): for ranks that compute on the CPU,
	// so their runtimes' thread pools do not contend.
	BindCPUs bool
	// Transport carries the operations: TransportTCP ("tcp", the default:
	// TCP, and shared memory on one host) or TransportMPI ("mpi": Open MPI,
	// in a program built with -tags mpi and started by mpirun, which gives
	// the ranks; InitMethod is then unused). Default: $XLADDP_BACKEND.
	Transport string
	// FlightDir, when set, is where this rank writes its flight record
	// (flight-rank<N>.json: the last operations it issued) when the group
	// fails, when the process gets SIGUSR1, and at Destroy (a rank that
	// left early shows where it stopped). Default: $XLADDP_FLIGHT_DIR.
	FlightDir string
	// FlightSize is how many operations the flight record keeps: 0 takes
	// $XLADDP_FLIGHT_SIZE, else 2048; a negative size turns it off.
	FlightSize int
}

// NewOptions returns Options that take everything from the environment.
func NewOptions() Options {
	return Options{InitMethod: "env://", Rank: -1, WorldSize: -1, LocalRank: -1, LocalWorldSize: -1,
		Token: store.TokenFromEnv(), Debug: os.Getenv(EnvDistributedDebug) == "1", BindCPUs: os.Getenv(EnvBindCPUs) == "1",
		Transport: os.Getenv(EnvTransport), FlightDir: os.Getenv(EnvFlightDir)}
}

// environWorld is this process's worker environment.
func environWorld() (workerenv.World, error) {
	w, err := workerenv.Parse(os.Getenv)
	if err != nil {
		return w, fmt.Errorf("ddp: %w", err)
	}
	return w.Placed(), nil
}

// resolve fills -1 fields from the environment (torch's variables, else
// Open MPI's) and validates them.
func (o *Options) resolve() error {
	// A wrong init method is the first thing to fix, whatever else is set.
	if u, err := url.Parse(o.InitMethod); o.InitMethod != "" && (err != nil || (u.Scheme != "env" && u.Scheme != "tcp" && u.Scheme != "file")) {
		return fmt.Errorf("ddp: init method %q: want env://, tcp://HOST:PORT or file:///shared/file", o.InitMethod)
	}
	if err := o.CheckTransport(); err != nil {
		return err
	}
	if err := o.resolveFlightSize(); err != nil {
		return err
	}
	if err := o.resolveTimeout(); err != nil {
		return err
	}
	if o.Transport != TransportTCP {
		if os.Getenv(EnvDistributedDebug) != "0" {
			o.Debug = true
		}
		// The engine's launcher gives the ranks (checkEngineWorld).
		return nil
	}
	if err := o.resolveWorld(); err != nil {
		return err
	}
	switch {
	case o.WorldSize < 1:
		return fmt.Errorf("ddp: WORLD_SIZE=%d: need at least 1 process", o.WorldSize)
	case o.Rank < 0 || o.Rank >= o.WorldSize:
		return fmt.Errorf("ddp: RANK=%d but WORLD_SIZE=%d: ranks run from 0 to %d", o.Rank, o.WorldSize, o.WorldSize-1)
	case o.LocalRank != -1 && o.LocalWorldSize != -1 && (o.LocalRank < 0 || o.LocalRank >= o.LocalWorldSize):
		return fmt.Errorf("ddp: LOCAL_RANK=%d but LOCAL_WORLD_SIZE=%d", o.LocalRank, o.LocalWorldSize)
	}
	if o.InitMethod == "" {
		o.InitMethod = "env://"
	}
	return nil
}

// resolveWorld fills the ranks and sizes left at -1 from the environment;
// the rank and world size must be there.
func (o *Options) resolveWorld() error {
	var env workerenv.World
	if o.Rank == -1 || o.WorldSize == -1 || o.LocalRank == -1 || o.LocalWorldSize == -1 {
		var err error
		if env, err = environWorld(); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		field    *int
		env      string
		value    int
		required bool
	}{{&o.Rank, EnvRank, env.Rank, true}, {&o.WorldSize, EnvWorldSize, env.WorldSize, true},
		{&o.LocalRank, EnvLocalRank, env.LocalRank, false}, {&o.LocalWorldSize, EnvLocalWorldSize, env.LocalWorldSize, false}} {
		if *f.field != -1 {
			continue
		}
		ok := f.value != workerenv.Unset
		if !ok && f.required && !o.Launched() {
			return fmt.Errorf("ddp: %s is not set: %w: start it with ddprun, torchrun or mpirun (e.g. %s), "+
				"or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself", f.env, ErrNoLauncher, launcherExample())
		}
		if !ok && f.required {
			return fmt.Errorf("ddp: %s is not set: set $%s (or Options) for every process, as torchrun does", f.env, f.env)
		}
		if ok {
			*f.field = f.value
		}
	}
	return nil
}

// Launched reports whether anything says a launcher started this process:
// a rank or world size in Options or in torch's or Open MPI's variables.
func (o *Options) Launched() bool {
	if o.Rank != -1 || o.WorldSize != -1 {
		return true
	}
	// A variable set but malformed still says a launcher was meant.
	env, err := workerenv.Parse(os.Getenv)
	return err != nil || env.Launched()
}

// launcherExample is the ddprun command line that starts this program.
func launcherExample() string {
	return "ddprun --nproc_per_node=2 " + filepath.Base(os.Args[0])
}

// CheckTransport normalizes and checks Backend ("" is tcp).
func (o *Options) CheckTransport() error {
	t, err := knobs.Transport(o.Transport)
	if err != nil {
		return fmt.Errorf("ddp: backend %q: want %s (the default) or %s ($%s)", o.Transport, TransportTCP, TransportMPI, EnvTransport)
	}
	o.Transport = cmp.Or(t, TransportTCP)
	return nil
}

// resolveTimeout fills Timeout from $XLADDP_TIMEOUT (a Go duration or
// seconds) or DefaultTimeout.
func (o *Options) resolveTimeout() error {
	if o.Timeout > 0 {
		return nil
	}
	v := strings.TrimSpace(os.Getenv(EnvTimeout))
	if v == "" {
		o.Timeout = DefaultTimeout
		return nil
	}
	d, err := knobs.Timeout(v)
	if err != nil {
		return fmt.Errorf("ddp: %w", err)
	}
	o.Timeout = d
	return nil
}

// resolveFlightSize fills FlightSize from $XLADDP_FLIGHT_SIZE or the
// default, and bounds it.
func (o *Options) resolveFlightSize() error {
	if o.FlightSize == 0 {
		o.FlightSize = flight.DefaultSize
		if v := strings.TrimSpace(os.Getenv(EnvFlightSize)); v != "" {
			n, err := knobs.FlightSize(v, flight.DefaultSize, maxFlightSize)
			if err != nil {
				return fmt.Errorf("ddp: %w", err)
			}
			o.FlightSize = cmp.Or(n, -1)
		}
	}
	if o.FlightSize > maxFlightSize {
		return fmt.Errorf("ddp: a flight record of %d operations is too large: keep at most %d (the default is %d)",
			o.FlightSize, maxFlightSize, flight.DefaultSize)
	}
	return nil
}
