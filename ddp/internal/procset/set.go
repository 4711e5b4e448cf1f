package procset

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// StopGrace is how long stopped processes get between SIGTERM and
// SIGKILL when the job fails.
const StopGrace = 3 * time.Second

// PreemptGrace is how long they get when the job itself is stopped
// (SIGTERM: a Spot notice, a SageMaker stop, SLURM's --signal), as
// torchrun's agent gives them: time to finish the step and checkpoint.
const PreemptGrace = 30 * time.Second

// tailLines is how much of a failed process's output Tail keeps.
const tailLines = 20

// Process is one started process of a Set.
type Process struct {
	LocalRank, Rank int
	Cmd             *exec.Cmd
	// Tail keeps its last output lines (write its output to it too).
	Tail    *Tail
	done    chan struct{} // closed once the process is reaped
	drained chan struct{} // closed once its output is read (or abandoned)
	// State and WaitErr are how it ended, set once Done is closed.
	State   *os.ProcessState
	WaitErr error
}

// NewProcess is cmd as the process of the given ranks, not started yet.
func NewProcess(cmd *exec.Cmd, localRank, rank int) *Process {
	return &Process{LocalRank: localRank, Rank: rank, Cmd: cmd, Tail: &Tail{max: tailLines}, done: make(chan struct{}),
		drained: make(chan struct{})}
}

// Done is closed once the process is reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Drained is closed once its output is read (or abandoned).
func (p *Process) Drained() <-chan struct{} { return p.drained }

// Exited reports whether the process has been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Set is the processes of one job (a node's workers for one attempt, or
// Spawn's processes), started and stopped together.
type Set struct {
	Processes []*Process
	// Exits receives each process once it is reaped.
	Exits chan *Process
	// closers are closed once every process's output is drained (its
	// log files).
	closers []io.Closer
}

// NewSet is an empty set for up to n processes.
func NewSet(n int) *Set { return &Set{Exits: make(chan *Process, n)} }

// CloseAfter closes c once Stop has drained every process's output.
func (set *Set) CloseAfter(c io.Closer) { set.closers = append(set.closers, c) }

// Start runs p's command in its own process group (so a stop reaches
// whatever it started), killed if this process dies (Pdeathsig), with its
// output through pipes of our own; its exit is sent on Exits.
func (set *Set) Start(p *Process, stdout, stderr io.Writer) error {
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	output, err := StartWithOutput(p.Cmd, stdout, stderr)
	if err != nil {
		return err
	}
	set.Processes = append(set.Processes, p)
	go func() {
		p.WaitErr = p.Cmd.Wait()
		p.State = p.Cmd.ProcessState
		close(p.done)
		set.Exits <- p
		output.Drain()
		close(p.drained)
	}()
	return nil
}

// Stop ends every process still running: SIGTERM to its process group
// (and SIGCONT: a stopped process, SIGSTOP or a debugger, handles SIGTERM
// only once continued), then SIGKILL after grace; it returns once all are
// reaped, their output drained and the CloseAfter closers closed.
func (set *Set) Stop(grace time.Duration) {
	for _, p := range set.Processes {
		if !p.Exited() {
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGCONT)
		}
	}
	deadline := time.After(grace)
	for _, p := range set.Processes {
		select {
		case <-p.done:
		case <-deadline:
		}
	}
	for _, p := range set.Processes {
		// Also the group's other processes, even if the leader is gone.
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	for _, p := range set.Processes {
		<-p.drained // the copiers write to the files closed below
	}
	for _, c := range set.closers {
		_ = c.Close()
	}
	set.closers = nil
}

// Preempted reports whether every process exited 0 or with
// workerenv.ExitPreempted, and one at least with the latter: the job
// checkpointed and can resume.
func (set *Set) Preempted() bool {
	some := false
	for _, p := range set.Processes {
		if p.State == nil {
			return false
		}
		switch p.State.ExitCode() {
		case 0:
		case workerenv.ExitPreempted:
			some = true
		default:
			return false
		}
	}
	return some
}

// Succeeded reports whether every process has exited, with 0.
func (set *Set) Succeeded() bool {
	for _, p := range set.Processes {
		if !p.Exited() || p.State.ExitCode() != 0 {
			return false
		}
	}
	return len(set.Processes) > 0
}

// Tail keeps the last lines written to it.
type Tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *Tail) Write(p []byte) (int, error) {
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

// String is the lines kept, newline-separated.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// SignalName names a signal as users know it (SIGKILL, …).
func SignalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGABRT: "SIGABRT", syscall.SIGINT: "SIGINT", syscall.SIGBUS: "SIGBUS", syscall.SIGHUP: "SIGHUP"}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s)
}
