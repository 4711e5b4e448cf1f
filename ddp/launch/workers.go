package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// stopGrace is how long stopped workers get between SIGTERM and SIGKILL
// when the job fails.
const stopGrace = 3 * time.Second

// preemptGrace is how long they get when ddprun itself is stopped
// (SIGTERM: a Spot notice, a SageMaker stop, SLURM's --signal), as
// torchrun's agent gives them: time to finish the step and checkpoint.
const preemptGrace = 30 * time.Second

// preempted reports whether every worker exited 0 or with
// workerenv.ExitPreempted, and one at least with the latter: the job
// checkpointed and can resume.
func (set *workerSet) preempted() bool {
	some := false
	for _, w := range set.workers {
		if w.state == nil {
			return false
		}
		switch w.state.ExitCode() {
		case 0:
		case workerenv.ExitPreempted:
			some = true
		default:
			return false
		}
	}
	return some
}

// outputDrain is how long a reaped worker's output is read on while a
// process it started keeps the pipes open.
const outputDrain = 500 * time.Millisecond

// tailLines is how much of a failed worker's output the summary quotes.
const tailLines = 20

// worker is one started worker process.
type worker struct {
	localRank, rank int
	cmd             *exec.Cmd
	tail            *tail
	done            chan struct{} // closed once the process is reaped
	drained         chan struct{} // closed once its output is read (or abandoned)
	state           *os.ProcessState
	waitErr         error
}

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

// workerSet is a node's workers for one attempt.
type workerSet struct {
	workers []*worker
	exits   chan *worker
	logs    []io.Closer
}

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
func startWorkers(spec workerSpec) (*workerSet, error) {
	c := spec.cfg
	host, port, _ := strings.Cut(spec.master, ":")
	set := &workerSet{exits: make(chan *worker, c.NProcPerNode)}
	for lr := range c.NProcPerNode {
		rank := spec.offset + lr
		env := append(append([]string(nil), spec.env...), workerEnv(c, spec, lr, rank, host, port)...)
		cmd := exec.Command(c.Program, c.Args...)
		cmd.Env = env
		w := newWorker(cmd, lr, rank)
		outs, errs, err := set.streams(spec, w)
		if err != nil {
			set.stop()
			return nil, err
		}
		if err := set.start(w, outs, errs); err != nil {
			set.stop()
			return nil, fmt.Errorf("starting worker rank %d (%s): %w", rank, c.Program, err)
		}
	}
	return set, nil
}

func newWorker(cmd *exec.Cmd, localRank, rank int) *worker {
	return &worker{localRank: localRank, rank: rank, cmd: cmd, tail: &tail{max: tailLines}, done: make(chan struct{}),
		drained: make(chan struct{})}
}

// start runs w's command in its own process group (so a stop reaches
// whatever it started), killed if this process dies (Pdeathsig), with its
// output through pipes of our own; its exit is sent on set.exits.
func (set *workerSet) start(w *worker, stdout, stderr io.Writer) error {
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	output, err := startWithOutput(w.cmd, stdout, stderr)
	if err != nil {
		return err
	}
	set.workers = append(set.workers, w)
	go func() {
		w.waitErr = w.cmd.Wait()
		w.state = w.cmd.ProcessState
		close(w.done)
		set.exits <- w
		output.drain()
		close(w.drained)
	}()
	return nil
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
func (set *workerSet) streams(spec workerSpec, w *worker) (stdout, stderr io.Writer, err error) {
	c := spec.cfg
	dest := func(bit int, console io.Writer, name string) (io.Writer, error) {
		shown := []io.Writer{w.tail}
		logged := c.Redirects[w.localRank]&bit != 0 || c.Tee[w.localRank]&bit != 0
		onConsole := c.Redirects[w.localRank]&bit == 0 && (c.LocalRanksFilter == nil || c.LocalRanksFilter[w.localRank])
		if onConsole {
			shown = append(shown, console)
		}
		writers := []io.Writer{&linePrefixer{w: io.MultiWriter(shown...), prefix: fmt.Sprintf("[rank%d]:", w.rank)}}
		if logged {
			dir := filepath.Join(c.LogDir, c.RdzvID, fmt.Sprintf("attempt_%d", spec.attempt), fmt.Sprint(w.localRank))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("--log_dir: %w", err)
			}
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("--log_dir: %w", err)
			}
			set.logs = append(set.logs, f)
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

// consoleMu keeps lines of different workers from interleaving.
var consoleMu sync.Mutex

// linePrefixer writes each line it is given behind prefix, whole, so
// lines of different workers never interleave on the console.
type linePrefixer struct {
	w      io.Writer
	prefix string
}

func (p *linePrefixer) Write(line []byte) (int, error) {
	consoleMu.Lock()
	defer consoleMu.Unlock()
	if _, err := p.w.Write(append([]byte(p.prefix), line...)); err != nil {
		return 0, err
	}
	return len(line), nil
}

// processOutput is a started process's stdout and stderr, copied line by
// line by two goroutines.
type processOutput struct {
	readers [2]*os.File
	copying sync.WaitGroup
}

// startWithOutput starts cmd with its stdout and stderr copied, a line per
// Write, to stdout and stderr. They are our own pipes, not
// cmd.StdoutPipe's, so that Wait reaps the process without waiting for
// its output, which a child of it may hold open long after it exited.
func startWithOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*processOutput, error) {
	stdoutR, stdoutW, err1 := os.Pipe()
	stderrR, stderrW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		closeAll(stdoutR, stdoutW, stderrR, stderrW)
		return nil, fmt.Errorf("output pipes: %w", err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	err := cmd.Start()
	closeAll(stdoutW, stderrW) // the process holds them now
	if err != nil {
		closeAll(stdoutR, stderrR)
		return nil, err
	}
	o := &processOutput{readers: [2]*os.File{stdoutR, stderrR}}
	o.copying.Add(2)
	go copyLines(&o.copying, stdoutR, stdout)
	go copyLines(&o.copying, stderrR, stderr)
	return o, nil
}

// drain, once the process has exited, reads what it wrote until EOF, or
// for outputDrain if a child of it still holds the pipes, then abandons
// them; the copying goroutines have ended when it returns.
func (o *processOutput) drain() {
	for _, r := range o.readers {
		_ = r.SetReadDeadline(time.Now().Add(outputDrain))
	}
	o.copying.Wait()
	closeAll(o.readers[:]...)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// maxOutputLine is the longest line copyLines writes whole; a longer one
// is cut into lines of this length.
const maxOutputLine = 1 << 20

// copyLines copies r to w one whole line per Write (a newline added to
// an unfinished last line), until EOF or r's read deadline.
func copyLines(wg *sync.WaitGroup, r io.Reader, w io.Writer) {
	defer wg.Done()
	br := bufio.NewReaderSize(r, maxOutputLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			// A copy: the reader's buffer is reused by the next read.
			out := append([]byte(nil), line...)
			if out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			_, _ = w.Write(out)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// stop ends every worker still running: SIGTERM to its process group,
// then SIGKILL after stopGrace, and waits until all are reaped.
func (set *workerSet) stop() { set.stopWithin(stopGrace) }

// stopWithin is stop with grace between SIGTERM and SIGKILL.
func (set *workerSet) stopWithin(grace time.Duration) {
	for _, w := range set.workers {
		if !w.exited() {
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGTERM)
			// A stopped worker (SIGSTOP, a debugger) handles SIGTERM only
			// once continued.
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGCONT)
		}
	}
	deadline := time.After(grace)
	for _, w := range set.workers {
		select {
		case <-w.done:
		case <-deadline:
		}
	}
	for _, w := range set.workers {
		// Also the group's other processes, even if the leader is gone.
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		<-w.done
	}
	for _, w := range set.workers {
		<-w.drained // the copiers write to the log files closed below
	}
	for _, l := range set.logs {
		_ = l.Close()
	}
	set.logs = nil
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// describe turns a reaped worker into an exit (nil for success); a
// failure's tail is read once its output is drained (at most outputDrain).
func (w *worker) describe(node int) *exit {
	st := w.state
	if st == nil {
		return &exit{node: node, rank: w.rank, localRank: w.localRank, code: 1, tail: fmt.Sprint(w.waitErr)}
	}
	e := &exit{node: node, rank: w.rank, localRank: w.localRank, code: st.ExitCode()}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.signal = unixSignalName(ws.Signal())
		e.code = 128 + int(ws.Signal())
	}
	if e.code == 0 {
		return nil
	}
	<-w.drained
	e.tail = w.tail.String()
	return e
}

func unixSignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGABRT: "SIGABRT", syscall.SIGINT: "SIGINT", syscall.SIGBUS: "SIGBUS", syscall.SIGHUP: "SIGHUP"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s)
}

// tail keeps the last max lines written to it.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		t.lines = append(t.lines, l)
	}
	if over := len(t.lines) - t.max; over > 0 {
		t.lines = append(t.lines[:0], t.lines[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
