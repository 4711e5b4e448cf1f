package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/knobs"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// The process group backends the workers may use (dist.TransportTCP and
// dist.TransportMPI, spelled again here: ddprun links no more than it runs).
const (
	backendTCP = "tcp"
	backendMPI = "mpi"
)

// mpirunStopGrace is how long mpirun gets to stop its workers after
// SIGTERM before it is killed.
const mpirunStopGrace = 5 * time.Second

// mpirunSigkillTimeout is Open MPI's odls_base_sigkill_timeout under
// ddprun, unless $OMPI_MCA_odls_base_sigkill_timeout sets it: the time a
// failed job's other ranks get to dump their flight records.
const mpirunSigkillTimeout = 2 * time.Second

// sigkillTimeoutEnv is how a user sets odls_base_sigkill_timeout.
const sigkillTimeoutEnv = "OMPI_MCA_odls_base_sigkill_timeout"

// mpirunOrphanGrace is how long mpirun may outlive all its workers.
const mpirunOrphanGrace = 5 * time.Second

// watchWorkersOf closes orphaned when the processes mpirun (pid) started
// have all ended (gone, or zombies it does not reap) for
// mpirunOrphanGrace while mpirun still runs; it returns when done closes.
func watchWorkersOf(pid int, done <-chan struct{}, orphaned chan<- struct{}) {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	sawWorkers := false
	var allEnded time.Time
	for {
		select {
		case <-done:
			return
		case <-ticker.C:
		}
		live, ended := childrenOf(pid)
		sawWorkers = sawWorkers || len(live)+ended > 0
		switch {
		case !sawWorkers || len(live) > 0:
			allEnded = time.Time{}
		case allEnded.IsZero():
			allEnded = time.Now()
		case time.Since(allEnded) > mpirunOrphanGrace:
			close(orphaned)
			return
		}
	}
}

// childrenOf lists pid's child processes that run and counts those that
// ended (zombies), from /proc.
func childrenOf(pid int) (live []int, ended int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if fields[0] == "Z" {
			ended++
		} else if child, err := strconv.Atoi(e.Name()); err == nil {
			live = append(live, child)
		}
	}
	return live, ended
}

// parseBackend checks --backend (empty: $XLADDP_BACKEND, else tcp).
func parseBackend(flag string, getenv func(string) string) (string, error) {
	v, from := flag, ""
	if strings.TrimSpace(v) == "" {
		v, from = getenv(workerenv.Transport), " (from $"+workerenv.Transport+")"
	}
	b, err := knobs.Transport(v)
	if err != nil {
		return "", fmt.Errorf("--backend=%q%s: want tcp (the default) or mpi", v, from)
	}
	return cmp.Or(b, backendTCP), nil
}

// checkMPI refuses what ddprun cannot do on the mpi backend.
func checkMPI(c Config) error {
	if c.NNodesMax > 1 {
		return errors.New("--backend=mpi: ddprun runs one node's workers under mpirun; a job across nodes is started " +
			"by mpirun itself, once, with the hosts (mpirun --hostfile HOSTS -np N TRAINING_BINARY --backend mpi), " +
			"as SageMaker's mpi distribution and SLURM sites do")
	}
	if c.LogDir != "" || len(c.LocalRanksFilter) > 0 {
		return errors.New("--backend=mpi: mpirun carries the workers' output; --log_dir, --redirects, --tee and " +
			"--local_ranks_filter are not available (mpirun's --output-filename is)")
	}
	return nil
}

// mpirunCommand is the mpirun command line that starts this node's
// workers on the mpi backend, and what it adds to the workers'
// environment (see mpirunEnv): the backend and torchrun's settings.
func mpirunCommand(c Config, environ []string, attempt int) (args, added []string) {
	args = []string{"mpirun", "-np", strconv.Itoa(c.NProcPerNode), "--oversubscribe",
		// The workers bind themselves (XLADDP_BIND_CPUS), as under torchrun.
		"--bind-to", "none",
		// Each line tagged with its rank, which mpiOutput turns into
		// ddprun's own [rankN]: prefix.
		"--tag-output"}
	if !hasEnv(environ, sigkillTimeoutEnv) {
		// When a rank fails, mpirun continues the others, SIGTERMs them
		// a timeout later and SIGKILLs them a timeout after that. Its
		// default, 1 s, is too short for a loaded node's ranks to write
		// their flight records (a continued SIGSTOPped rank left none
		// under make test's load).
		args = append(args, "--mca", "odls_base_sigkill_timeout", strconv.Itoa(int(mpirunSigkillTimeout/time.Second)))
	}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	args = append(append(args, c.Program), c.Args...)
	w := jobWorld(c, environ, attempt)
	w.Transport = backendMPI
	return args, w.Environ()
}

// mpirunEnv is the environment mpirun passes the workers: the caller's
// without torchrun's per-rank variables (MPI gives the ranks; stale ones
// would contradict it), plus added.
func mpirunEnv(environ, added []string) []string {
	perRank := workerenv.PerRank()
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(perRank, name) {
			env = append(env, kv)
		}
	}
	return append(env, added...)
}

// mpirunWorkers are this node's workers started by mpirun
// (--backend=mpi): MPI gives the ranks, and mpirun starts and stops them.
type mpirunWorkers struct {
	cfg            Config
	environ        []string
	stdout, stderr io.Writer
	say            func(string, ...any)
}

func (m *mpirunWorkers) close() {}

// attempt runs mpirun once and tells how it ended: mpirun's exit status
// for a failure, with the flight records' diagnosis.
func (m *mpirunWorkers) attempt(ctx context.Context, attempt int) outcome {
	c, environ, say := m.cfg, m.environ, m.say
	args, added := mpirunCommand(c, environ, attempt)
	dumps, ownDumps, err := flightDir(environ, attempt)
	if err != nil {
		return outcome{kind: notStarted, err: fmt.Errorf("the flight record directory: %w", err)}
	}
	added = append(added, workerenv.FlightDir+"="+dumps)
	path, err := exec.LookPath(args[0])
	if err != nil {
		return outcome{kind: notStarted, err: fmt.Errorf("--backend=mpi needs Open MPI's mpirun: %w (apt-get install openmpi-bin; make deps does)", err)}
	}
	cmd := exec.Command(path, args[1:]...)
	cmd.Env = mpirunEnv(environ, added)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outTags, errTags := &mpiTagWriter{w: m.stdout}, &mpiTagWriter{w: m.stderr}
	output, err := procset.StartWithOutput(cmd, outTags, errTags)
	if err != nil {
		return outcome{kind: notStarted, err: fmt.Errorf("starting mpirun: %w", err)}
	}
	done := make(chan struct{})
	stopperDone := make(chan struct{})
	orphaned := make(chan struct{})
	go func() {
		defer close(stopperDone)
		stopMpirun(ctx, cmd, done, orphaned, say)
	}()
	go watchWorkersOf(cmd.Process.Pid, done, orphaned)
	err = cmd.Wait()
	close(done)
	<-stopperDone
	output.Drain()
	_, _ = outTags.flush(), errTags.flush()
	diagnosis := ""
	if err != nil && ctx.Err() == nil {
		diagnosis = mpiFlight(dumps, c.NProcPerNode)
	}
	if ownDumps && diagnosis == "" {
		os.RemoveAll(dumps)
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil && errors.As(err, &ee) && ee.ExitCode() == workerenv.ExitPreempted:
		return outcome{kind: preempted, signalled: true}
	case ctx.Err() != nil:
		return outcome{kind: stopped}
	case err == nil:
		return outcome{kind: succeeded}
	}
	res := outcome{kind: remoteFailed, why: fmt.Sprintf("mpirun failed (%v)", err), code: 1, flight: diagnosis, flightDir: dumps}
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		res.code = ee.ExitCode()
	}
	return res
}

// stopMpirun ends mpirun when ctx ends or its workers are gone while it
// lingers, until done. Open MPI 4.1's mpirun forwards SIGTERM one
// odls_base_sigkill_timeout (1 s) late and SIGKILLs a timeout later: no
// time to checkpoint. The workers get SIGTERM from ddprun and
// procset.PreemptGrace; mpirun ends with them, or is stopped after that.
func stopMpirun(ctx context.Context, cmd *exec.Cmd, done, orphaned <-chan struct{}, say func(string, ...any)) {
	select {
	case <-done:
	case <-ctx.Done():
		live, _ := childrenOf(cmd.Process.Pid)
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		select {
		case <-done:
		case <-time.After(procset.PreemptGrace):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(mpirunStopGrace):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	case <-orphaned:
		say("ddprun: every worker has ended but mpirun did not exit within %v (Open MPI 4.1's mpirun can hang "+
			"after a failed job); stopping it", mpirunOrphanGrace)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// mpiTagWriter turns mpirun --tag-output's "[JOB,RANK]<stdout>:" into
// ddprun's "[rankRANK]:" prefix. mpirun cuts long output into chunks,
// each tagged, with no newline between them, so one line it writes may
// hold a rank's line in pieces, or a piece of one rank's line and then
// another rank's: the writer puts each rank's pieces back together.
type mpiTagWriter struct {
	w io.Writer
	// pending is each rank's unfinished line.
	pending map[string][]byte
}

// mpiTag is one rank's chunk tag; the group is the rank.
var mpiTag = regexp.MustCompile(`\[\d+,(\d+)\]<std(?:out|err|diag)>:`)

// maxPendingLine bounds a rank's unfinished line: longer, it is written
// as a line of its own.
const maxPendingLine = 1 << 20

func (m *mpiTagWriter) Write(line []byte) (int, error) {
	tags := mpiTag.FindAllSubmatchIndex(line, -1)
	if len(tags) == 0 || tags[0][0] != 0 {
		return len(line), m.emit(line) // mpirun's own
	}
	if m.pending == nil {
		m.pending = map[string][]byte{}
	}
	for i, tag := range tags {
		rank := string(line[tag[2]:tag[3]])
		end := len(line)
		if i+1 < len(tags) {
			end = tags[i+1][0]
		}
		text := append(m.pending[rank], line[tag[1]:end]...)
		if i+1 < len(tags) && len(text) < maxPendingLine {
			m.pending[rank] = text // the rank's line goes on in a later chunk
			continue
		}
		delete(m.pending, rank)
		if i+1 < len(tags) {
			text = append(text, '\n')
		}
		if err := m.emit(append([]byte("[rank"+rank+"]:"), text...)); err != nil {
			return 0, err
		}
	}
	return len(line), nil
}

// flush writes the lines ranks left unfinished, in rank order.
func (m *mpiTagWriter) flush() error {
	ranks := slices.Collect(maps.Keys(m.pending))
	slices.SortFunc(ranks, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	for _, rank := range ranks {
		if err := m.emit(append([]byte("[rank"+rank+"]:"), append(m.pending[rank], '\n')...)); err != nil {
			return err
		}
		delete(m.pending, rank)
	}
	return nil
}

// emit writes one line, whole, to the console.
func (m *mpiTagWriter) emit(line []byte) error {
	consoleMu.Lock()
	defer consoleMu.Unlock()
	_, err := m.w.Write(line)
	return err
}
