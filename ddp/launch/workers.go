package launch

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// exit describes how a worker ended.
type exit struct {
	node, rank, localRank int
	code                  int    // exit status; 128+signal for a signal
	signal                string // "" unless killed by a signal
	tail                  string
}

func (e *exit) String() string {
	how := fmt.Sprintf("exit code %d", e.code)
	if e.signal != "" {
		how = "signal " + e.signal
	}
	return fmt.Sprintf("node %d, rank %d (local rank %d): %s", e.node, e.rank, e.localRank, how)
}

// workerSet is a node's workers for one attempt (or several, when they
// regroup in place): their processes, each a local rank (package procset
// starts, watches and stops them), and the prefixes of their lines.
type workerSet struct {
	*procset.Set
	prefixes map[*procset.Process][]*linePrefixer
}

// newWorkerSet is an empty set for n workers.
func newWorkerSet(n int) workerSet {
	return workerSet{Set: procset.NewSet(n), prefixes: map[*procset.Process][]*linePrefixer{}}
}

// renumber gives w its rank in a new round, in the agent's records and
// in its lines' prefix.
func (set workerSet) renumber(w *procset.Process, rank int) {
	w.Rank = rank
	for _, p := range set.prefixes[w] {
		p.rank.Store(int64(rank))
	}
}

// stop ends the workers still running (SIGTERM, then SIGKILL after
// procset.StopGrace) and closes their log files.
func (set workerSet) stop() { set.Stop(procset.StopGrace) }

// workerSpec is what startWorkers needs.
type workerSpec struct {
	cfg     Config
	node    int
	offset  int // global rank of local rank 0
	world   int
	master  string // host:port of the workers' store
	attempt int
	env     []string
	stdout  io.Writer
	stderr  io.Writer
}

// startWorkers starts spec.cfg.NProcPerNode workers, each in its own
// process group (so a stop reaches whatever it started) and killed if
// the agent dies (Pdeathsig).
func startWorkers(spec workerSpec) (workerSet, error) {
	c := spec.cfg
	host, port, _ := strings.Cut(spec.master, ":")
	set := newWorkerSet(c.NProcPerNode)
	for lr := range c.NProcPerNode {
		rank := spec.offset + lr
		env := append(append([]string(nil), spec.env...), workerEnv(c, spec, lr, rank, host, port)...)
		cmd := exec.Command(c.Program, c.Args...)
		cmd.Env = env
		w := procset.NewProcess(cmd, lr, rank)
		outs, errs, err := set.streams(spec, w)
		if err != nil {
			set.stop()
			return workerSet{}, err
		}
		if err := set.Start(w, outs, errs); err != nil {
			set.stop()
			return workerSet{}, fmt.Errorf("starting worker rank %d (%s): %w", rank, c.Program, err)
		}
	}
	return set, nil
}

// workerEnv is torchrun's worker environment for local rank lr.
func workerEnv(c Config, spec workerSpec, lr, rank int, host, port string) []string {
	w := jobWorld(c, spec.env, spec.attempt)
	w.Rank, w.LocalRank, w.NodeRank, w.RoleRank = rank, lr, spec.node, rank
	w.WorldSize, w.LocalWorldSize, w.RoleWorldSize = spec.world, c.NProcPerNode, spec.world
	w.MasterAddr, w.MasterPort = host, port
	return w.Environ()
}

// jobWorld is what every worker of attempt sees alike, under any
// launcher: the role, the restarts, the run id, and on a node shared by
// several workers one thread each (as torchrun) and their own CPUs,
// unless environ says otherwise.
func jobWorld(c Config, environ []string, attempt int) workerenv.World {
	w := workerenv.Empty()
	w.RoleName, w.RunID = c.Role, c.RdzvID
	w.RestartCount, w.MaxRestarts = attempt, c.MaxRestarts
	if c.NProcPerNode > 1 && !hasEnv(environ, workerenv.Threads) {
		w.Threads = "1"
	}
	w.BindCPUs = c.NProcPerNode > 1 && !hasEnv(environ, workerenv.BindCPUs)
	w.CompileOnly = c.CompileOnly
	if c.Timeout > 0 {
		w.Timeout = c.Timeout.String()
	}
	return w
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// streams returns where a worker's stdout and stderr go: the console
// (prefixed "[rankN]:", unless filtered out or redirected), its log
// files (--redirects, --tee), and the tail kept for a failure summary.
func (set workerSet) streams(spec workerSpec, w *procset.Process) (stdout, stderr io.Writer, err error) {
	c := spec.cfg
	dest := func(bit int, console io.Writer, name string) (io.Writer, error) {
		shown := []io.Writer{w.Tail}
		logged := c.Redirects[w.LocalRank]&bit != 0 || c.Tee[w.LocalRank]&bit != 0
		onConsole := c.Redirects[w.LocalRank]&bit == 0 && (c.LocalRanksFilter == nil || c.LocalRanksFilter[w.LocalRank])
		if onConsole {
			shown = append(shown, console)
		}
		prefixer := &linePrefixer{w: io.MultiWriter(shown...)}
		prefixer.rank.Store(int64(w.Rank))
		set.prefixes[w] = append(set.prefixes[w], prefixer)
		writers := []io.Writer{prefixer}
		if logged {
			dir := filepath.Join(c.LogDir, c.RdzvID, fmt.Sprintf("attempt_%d", spec.attempt), fmt.Sprint(w.LocalRank))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("--log_dir: %w", err)
			}
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("--log_dir: %w", err)
			}
			set.CloseAfter(f)
			writers = append(writers, f)
		}
		return io.MultiWriter(writers...), nil
	}
	if stdout, err = dest(1, spec.stdout, "stdout.log"); err != nil {
		return nil, nil, err
	}
	stderr, err = dest(2, spec.stderr, "stderr.log")
	return stdout, stderr, err
}

// describe turns a reaped worker into an exit (nil for success); a
// failure's tail is read once its output is drained.
func describe(w *procset.Process, node int) *exit {
	st := w.State
	if st == nil {
		return &exit{node: node, rank: w.Rank, localRank: w.LocalRank, code: 1, tail: fmt.Sprint(w.WaitErr)}
	}
	e := &exit{node: node, rank: w.Rank, localRank: w.LocalRank, code: st.ExitCode()}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.signal = procset.SignalName(ws.Signal())
		e.code = 128 + int(ws.Signal())
	}
	if e.code == 0 {
		return nil
	}
	<-w.Drained()
	e.tail = w.Tail.String()
	return e
}

// consoleMu keeps lines of different workers from interleaving.
var consoleMu sync.Mutex

// linePrefixer writes each line it is given behind "[rankN]:", whole,
// so lines of different workers never interleave on the console; N
// changes when the worker regroups in place.
type linePrefixer struct {
	w    io.Writer
	rank atomic.Int64
}

func (p *linePrefixer) Write(line []byte) (int, error) {
	consoleMu.Lock()
	defer consoleMu.Unlock()
	if _, err := p.w.Write(append(fmt.Appendf(nil, "[rank%d]:", p.rank.Load()), line...)); err != nil {
		return 0, err
	}
	return len(line), nil
}
