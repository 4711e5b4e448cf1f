package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/xladdp/xladdp/neuron/trn"
)

// Config is what the agent runs: torchrun's options, resolved.
type Config struct {
	// NNodesMin..NNodesMax nodes (equal unless --nnodes=MIN:MAX).
	NNodesMin, NNodesMax int
	// NProcPerNode workers on this node.
	NProcPerNode int
	// NodeRank is this node's rank (-1: assigned by the rendezvous).
	NodeRank int
	// MasterAddr and MasterPort are where worker rank 0 hosts the
	// workers' store (MasterPort 0: a free port, chosen by node 0).
	MasterAddr string
	MasterPort int
	// RdzvBackend is "static" (node ranks from --node_rank) or "c10d"
	// (ranks in order of arrival at the store at RdzvEndpoint).
	RdzvBackend  string
	RdzvEndpoint string
	RdzvID       string
	// RdzvTimeout bounds the whole rendezvous; JoinTimeout how long the
	// rendezvous waits for NNodesMin nodes; once they joined, an elastic
	// job (--nnodes=MIN:MAX) waits LastCallTimeout more for others
	// (torchrun's join_timeout, 600 s, and last_call_timeout, 30 s).
	RdzvTimeout, JoinTimeout, LastCallTimeout time.Duration
	// ReportInterval is how often a rendezvous still waiting says what
	// for (default 30 s).
	ReportInterval time.Duration
	Standalone     bool
	MaxRestarts    int
	// RestartOnPeerLoss restarts the workers after a peer's loss, where
	// they would otherwise regroup in place (--restart_on_peer_loss).
	RestartOnPeerLoss bool
	MonitorInterval   time.Duration
	// LogDir, when set, receives each worker's output (per attempt and rank).
	LogDir string
	// Redirects and Tee: per local rank, which streams go to the log file
	// only (Redirects) or to the log file and the console (Tee): 0 none,
	// 1 stdout, 2 stderr, 3 both.
	Redirects, Tee map[int]int
	// LocalRanksFilter limits the console to these local ranks (nil: all).
	LocalRanksFilter map[int]bool
	Role             string
	// Doctor (`ddprun doctor`) runs the checks and starts nothing; Check
	// (--check) runs this node's checks before a launch, which they stop.
	Doctor, Check bool
	// DryRun prints what was detected and the worker environments, and
	// starts nothing.
	DryRun bool
	// StallWarn (--stall_warn) is how long the job may go without a
	// collective completing before ddprun says where each rank stands
	// (again every StallWarn while it lasts; 0: never).
	StallWarn time.Duration
	// Timeout, when set (--timeout), bounds the workers' rendezvous and
	// each collective (XLADDP_TIMEOUT; their default is 10 minutes).
	Timeout time.Duration
	// CompileOnly runs the workers with XLADDP_COMPILE_ONLY=1: every
	// MarkStep compiles into the caches and executes nothing
	// (neuron_parallel_compile's pass).
	CompileOnly bool
	// Transport is the workers' process group transport (--backend): "tcp" (ddprun starts
	// them) or "mpi" (ddprun runs them under mpirun, one node only).
	Transport string
	// Notes are what detection chose that the user may not expect;
	// ddprun prints them before starting.
	Notes []string
	// Program and Args are the training binary and its arguments.
	Program string
	Args    []string
	// Sources says where each detected value came from (for --dry-run).
	Sources map[string]string
	// FlightRequests, when it delivers (ddprun's own SIGUSR1), has the
	// workers write their flight records and prints their diagnosis,
	// leaving the job running.
	FlightRequests <-chan struct{}
}

// flagNames are torchrun's options; each is also read from PET_<NAME>.
var flagNames = []string{"nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port", "rdzv_backend",
	"rdzv_endpoint", "rdzv_id", "rdzv_conf", "standalone", "max_restarts", "monitor_interval", "log_dir",
	"redirects", "tee", "local_ranks_filter", "role", "no_python", "run_path", "module", "dry_run", "compile_only", "backend", "check", "timeout", "stall_warn",
	"restart_on_peer_loss"}

// Usage is the help text, torchrun's in shape.
const Usage = `usage: ddprun [options] TRAINING_BINARY [ARGS...]
       ddprun doctor [options] [TRAINING_BINARY]
       ddprun flight DIR

Starts TRAINING_BINARY once per worker on this node, with torchrun's worker
environment (RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), meets the other
nodes' agents at the rendezvous endpoint, and stops every worker on every
node when one fails. Every option is also read from PET_<OPTION> (Kubeflow's
PyTorchJob), and what is left out is detected from SageMaker, SLURM, PBS or
Open MPI variables. Options take - or _ alike (--nproc-per-node). With
--backend=mpi the workers run under mpirun instead, on one node, and meet
through MPI.

ddprun doctor checks, within 5 s, what would stop the job with these
options (a taken port, MASTER_ADDR unresolvable or unreachable, /dev/shm too
small, NeuronCores another process holds, EFA, FI_PROVIDER and memlock on a
Trn1 job across nodes) and, run on every node, compares them (node ranks,
training binary, PJRT plugin and compiler versions); --check runs this
node's checks before a launch.

ddprun flight DIR prints which rank stands where from the flight records
under DIR: those a running job's workers wrote on SIGUSR1 (kill -USR1 sent
to ddprun asks every worker), or a failed job's in $XLADDP_FLIGHT_DIR.

options:
`

// ParseArgs parses ddprun's command line (torchrun's) with PET_ variables
// from getenv as defaults.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	f := pflag.NewFlagSet("ddprun", pflag.ContinueOnError)
	f.SetOutput(stderr)
	f.SetInterspersed(false)
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "-", "_"))
	})
	f.Usage = func() {
		fmt.Fprint(stderr, Usage)
		f.PrintDefaults()
	}
	nnodes := f.String("nnodes", "1", "number of nodes, or MIN:MAX for an elastic range")
	nproc := f.String("nproc_per_node", "1", "workers per node: N, auto, cpu, gpu or neuron")
	nodeRank := f.Int("node_rank", -1, "this node's rank (static rendezvous); assigned by the rendezvous when omitted")
	masterAddr := f.String("master_addr", "", "address of node 0 (static rendezvous: the rendezvous endpoint too)")
	masterPort := f.Int("master_port", 29500, "port on node 0 for the rendezvous (static) and the workers' store")
	rdzvBackend := f.String("rdzv_backend", "static", "rendezvous backend: c10d or static")
	rdzvEndpoint := f.String("rdzv_endpoint", "", "HOST:PORT of the rendezvous store (port 0 picks a free one and prints it)")
	rdzvID := f.String("rdzv_id", "none", "job id shared by every node")
	rdzvConf := f.String("rdzv_conf", "", "rendezvous settings, comma-separated: timeout=SECONDS, join_timeout=SECONDS, last_call_timeout=SECONDS (torchrun's read_timeout, close_timeout and heartbeat_timeout are taken and ignored)")
	standalone := f.Bool("standalone", false, "single node with a local rendezvous on a free port")
	maxRestarts := f.Int("max_restarts", 0, "how many times to restart the workers after a failure (an elastic job's restarts to admit a node are not counted)")
	restartOnLoss := f.Bool("restart_on_peer_loss", false, "after a peer's loss, restart the workers from the step they committed "+
		"(default: the workers that committed regroup in place, in the same processes)")
	monitor := f.Float64("monitor_interval", 0.1, "seconds between checks of the workers")
	stallWarn := f.Float64("stall_warn", 60, "seconds without a collective completing before ddprun says which rank is behind "+
		"and where each stands (from their flight records; repeated while the stall lasts, nothing is stopped; 0: never)")
	timeout := f.Float64("timeout", 0, "seconds the workers' process group waits for a rank in the rendezvous and in each collective "+
		"before it fails the job, naming it (0: their default, 600, or $XLADDP_TIMEOUT)")
	logDir := f.String("log_dir", "", "directory for the workers' output")
	redirects := f.String("redirects", "0", "streams sent to the log files only: 0-3, or LOCAL_RANK:N,... (1 stdout, 2 stderr, 3 both)")
	tee := f.String("tee", "0", "streams sent to the log files and the console: as --redirects")
	ranksFilter := f.String("local_ranks_filter", "", "comma-separated local ranks whose output reaches the console")
	role := f.String("role", "default", "the workers' role name")
	f.Bool("no_python", false, "accepted for torchrun compatibility (the training program is always a binary)")
	f.String("run_path", "", "accepted for torchrun compatibility")
	f.Bool("module", false, "accepted for torchrun compatibility; Python modules cannot run here")
	check := f.Bool("check", false, "run ddprun doctor's checks of this node first, and start nothing if one fails")
	dryRun := f.Bool("dry_run", false, "print what was detected and the worker environments, start nothing")
	compileOnly := f.Bool("compile_only", false,
		"compile every step's program into the caches without executing (neuron_parallel_compile); run the real job after")
	backend := f.String("backend", "", "the workers' process group backend: tcp, or mpi (run under mpirun, one node; "+
		"the binary built with -tags mpi) (default $XLADDP_BACKEND, else tcp)")
	doctor := len(args) > 0 && args[0] == "doctor"
	if doctor {
		args = args[1:]
	}
	if err := f.Parse(args); err != nil {
		return Config{}, err
	}
	sources := map[string]string{}
	for _, name := range flagNames {
		if f.Changed(name) {
			sources[name] = "--" + name
		}
	}
	// PET_<NAME> fills every option the command line left out.
	for _, name := range flagNames {
		if f.Changed(name) {
			continue
		}
		env := "PET_" + strings.ToUpper(name)
		if v := getenv(env); v != "" {
			if err := f.Set(name, v); err != nil {
				return Config{}, fmt.Errorf("$%s=%q: %w", env, v, err)
			}
			sources[name] = "$" + env
		}
	}
	if b, _ := f.GetBool("module"); b {
		return Config{}, errors.New("--module runs a Python module; ddprun starts binaries: give the training binary's path")
	}
	c := Config{NodeRank: *nodeRank, MasterAddr: *masterAddr, MasterPort: *masterPort, RdzvBackend: *rdzvBackend,
		RdzvEndpoint: *rdzvEndpoint, RdzvID: *rdzvID, Standalone: *standalone, MaxRestarts: *maxRestarts, RestartOnPeerLoss: *restartOnLoss,
		LogDir: *logDir, Role: *role, DryRun: *dryRun, Doctor: doctor, Check: *check, CompileOnly: *compileOnly, RdzvTimeout: 900 * time.Second, JoinTimeout: 600 * time.Second,
		LastCallTimeout: 30 * time.Second, ReportInterval: defaultReportInterval, Sources: sources}
	backendName, err := parseBackend(*backend, getenv)
	if err != nil {
		return Config{}, err
	}
	c.Transport = backendName
	if *stallWarn != 0 {
		if c.StallWarn, err = seconds(*stallWarn, 0.1, 86400); err != nil {
			return Config{}, fmt.Errorf("--stall_warn=%v: %w", *stallWarn, err)
		}
	}
	if *timeout != 0 {
		if c.Timeout, err = seconds(*timeout, 1, 86400); err != nil {
			return Config{}, fmt.Errorf("--timeout=%v: %w", *timeout, err)
		}
	}
	c, err = validate(c, f.Args(), *nnodes, *nproc, *rdzvConf, *monitor, *redirects, *tee, *ranksFilter, getenv)
	if err != nil {
		// An option that came from a PET_ variable is named as such.
		for name, src := range sources {
			if strings.HasPrefix(src, "$") && strings.Contains(err.Error(), "--"+name) {
				return Config{}, fmt.Errorf("%s: %w", src, err)
			}
		}
		return Config{}, err
	}
	return c, nil
}

// validate resolves and checks the parsed options.
func validate(c Config, rest []string, nnodes, nproc, rdzvConf string, monitor float64, redirects, tee, ranksFilter string,
	getenv func(string) string) (Config, error) {
	if len(rest) == 0 && !c.DryRun && !c.Doctor {
		return Config{}, errors.New("no training binary: ddprun [options] TRAINING_BINARY [ARGS...] (see --help)")
	}
	if len(rest) > 0 {
		c.Program, c.Args = rest[0], rest[1:]
	}
	var err error
	if c.NNodesMin, c.NNodesMax, err = parseNNodes(nnodes); err != nil {
		return Config{}, err
	}
	if c.NProcPerNode, err = parseNProc(nproc, getenv); err != nil {
		return Config{}, err
	}
	if c.RdzvBackend != "c10d" && c.RdzvBackend != "static" {
		return Config{}, fmt.Errorf("--rdzv_backend=%q: want c10d or static", c.RdzvBackend)
	}
	if err := parseRdzvConf(rdzvConf, &c); err != nil {
		return Config{}, err
	}
	if c.MonitorInterval, err = seconds(monitor, 0.001, 3600); err != nil {
		return Config{}, fmt.Errorf("--monitor_interval=%v: %w", monitor, err)
	}
	if c.MaxRestarts < 0 {
		return Config{}, fmt.Errorf("--max_restarts=%d: cannot be negative", c.MaxRestarts)
	}
	if c.MasterPort < 0 || c.MasterPort > 65535 {
		return Config{}, fmt.Errorf("--master_port=%d: want 0 to 65535", c.MasterPort)
	}
	// A node rank >= nnodes is the rendezvous' error, so the other nodes
	// hear of it too.
	if c.NodeRank < -1 {
		return Config{}, fmt.Errorf("--node_rank=%d: cannot be negative", c.NodeRank)
	}
	if c.Redirects, err = parseStreams("redirects", redirects, c.NProcPerNode); err != nil {
		return Config{}, err
	}
	if c.Tee, err = parseStreams("tee", tee, c.NProcPerNode); err != nil {
		return Config{}, err
	}
	if ranksFilter != "" {
		c.LocalRanksFilter = map[int]bool{}
		for _, s := range strings.Split(ranksFilter, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || r < 0 || r >= c.NProcPerNode {
				return Config{}, fmt.Errorf("--local_ranks_filter=%q: want local ranks from 0 to %d", ranksFilter, c.NProcPerNode-1)
			}
			c.LocalRanksFilter[r] = true
		}
	}
	if c.LogDir == "" && (len(c.Redirects) > 0 || len(c.Tee) > 0) {
		return Config{}, errors.New("--redirects and --tee write log files: give --log_dir")
	}
	if c.LogDir != "" {
		c.LogDir = filepath.Clean(c.LogDir)
	}
	return c, nil
}

func parseNNodes(s string) (lo, hi int, err error) {
	a, b, ranged := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi = lo
	var err2 error
	if ranged {
		hi, err2 = strconv.Atoi(strings.TrimSpace(b))
	}
	if err1 != nil || err2 != nil || lo < 1 || hi < lo || hi > 1<<16 {
		return 0, 0, fmt.Errorf("--nnodes=%q: want N or MIN:MAX with 1 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}

// neuronCores is one process per NeuronCore: the instance's logical
// cores (Trainium2 at its logical NeuronCore setting), else 2 for each
// /dev/neuronN of an instance type not known here.
func neuronCores(devDir string, getenv func(string) string, readFile func(string) ([]byte, error)) (int, error) {
	devices := trn.CountDevices(devDir)
	if devices == 0 {
		return 0, fmt.Errorf("--nproc_per_node=neuron: no Neuron device found (/dev/neuronN; or set %s)", trn.EnvNumDevices)
	}
	inst, ok, err := trn.DetectInstance(getenv, readFile)
	switch {
	case err != nil:
		return 0, fmt.Errorf("--nproc_per_node=neuron: %w", err)
	case ok:
		return inst.Cores, nil
	}
	return 2 * devices, nil
}

// parseNProc resolves --nproc_per_node: a count, or the devices of a kind.
func parseNProc(s string, getenv func(string) string) (int, error) {
	switch s {
	case "cpu":
		return runtime.NumCPU(), nil
	case "gpu":
		n := countDevices("/dev", "nvidia")
		if n == 0 {
			return 0, errors.New("--nproc_per_node=gpu: no NVIDIA GPU found (/dev/nvidiaN)")
		}
		return n, nil
	case "neuron":
		if n, ok, err := trn.DeviceCount(getenv); err != nil || ok {
			return n, err
		}
		return neuronCores("/dev", getenv, os.ReadFile)
	case "auto":
		if n := countDevices("/dev", "nvidia"); n > 0 {
			return n, nil
		}
		if n, err := parseNProc("neuron", getenv); err == nil {
			return n, nil
		}
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1<<12 {
		return 0, fmt.Errorf("--nproc_per_node=%q: want a count from 1 to 4096, or auto, cpu, gpu, neuron", s)
	}
	return n, nil
}

// countDevices counts dir's entries named prefix followed by digits only.
func countDevices(dir, prefix string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if _, err := strconv.Atoi(rest); ok && rest != "" && err == nil {
			n++
		}
	}
	return n
}

// seconds turns a count of seconds into a duration, refusing NaN, the
// infinities and anything outside [lo, hi].
func seconds(secs, lo, hi float64) (time.Duration, error) {
	if !(secs >= lo && secs <= hi) { // false for NaN
		return 0, fmt.Errorf("want seconds from %v to %v", lo, hi)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func parseRdzvConf(s string, c *Config) error {
	if s == "" {
		return nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "timeout", "join_timeout", "last_call_timeout", "read_timeout", "close_timeout", "heartbeat_timeout":
		default:
			return fmt.Errorf("--rdzv_conf: unknown setting %q (known: timeout, join_timeout, last_call_timeout, read_timeout, close_timeout, heartbeat_timeout)", k)
		}
		secs, err := strconv.ParseFloat(v, 64)
		var d time.Duration
		if err == nil {
			d, err = seconds(secs, 0.001, 7*86400)
		}
		if !ok || err != nil {
			return fmt.Errorf("--rdzv_conf=%q: %s: want SECONDS from 0.001 to 604800, e.g. timeout=900,join_timeout=600", s, k)
		}
		switch k {
		case "timeout":
			c.RdzvTimeout = d
		case "join_timeout":
			c.JoinTimeout = d
		case "last_call_timeout":
			c.LastCallTimeout = d
		default:
			// read_timeout, close_timeout, heartbeat_timeout: torch's c10d
			// settings, accepted; the store bounds its own reads.
		}
	}
	return nil
}

// parseStreams reads --redirects/--tee: N for every local rank, or
// LOCAL_RANK:N pairs.
func parseStreams(name, s string, nproc int) (map[int]int, error) {
	out := map[int]int{}
	bad := fmt.Errorf("--%s=%q: want 0-3 (1 stdout, 2 stderr, 3 both) or LOCAL_RANK:N,... with local ranks below %d", name, s, nproc)
	if !strings.Contains(s, ":") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 0 || v > 3 {
			return nil, bad
		}
		if v == 0 {
			return nil, nil
		}
		for r := range nproc {
			out[r] = v
		}
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		a, b, _ := strings.Cut(kv, ":")
		r, err1 := strconv.Atoi(strings.TrimSpace(a))
		v, err2 := strconv.Atoi(strings.TrimSpace(b))
		if err1 != nil || err2 != nil || r < 0 || r >= nproc || v < 0 || v > 3 {
			return nil, bad
		}
		if v > 0 {
			out[r] = v
		}
	}
	return out, nil
}
