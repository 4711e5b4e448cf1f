// Package cmdline is what the examples' command lines share: a pflag flag
// set with ddp.Run's flags (--spawn, --init-method, --backend,
// --cpu-devices, --device) in the style of xladdp's other commands, and a
// main that stops on SIGINT/SIGTERM and exits like them.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/training"
	"github.com/xladdp/xladdp/examples/internal/report"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/internal/workerenv"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/optim"
)

// FlagSet returns the command's flag set, writing usage to out, with
// ddp.Run's flags on it; their values are in the options after Parse.
func FlagSet(name string, out io.Writer) (*pflag.FlagSet, *ddp.Options) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(out)
	return fs, ddp.Flags(fs)
}

// Parse parses args; the examples take flags only.
func Parse(fs *pflag.FlagSet, args []string) error {
	if err := cli.MisplacedLauncherOption(args, func(name string) bool { return fs.Lookup(name) != nil }); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// Main runs run with the command line under the program's signal policy
// (ddp.NotifyContext: SIGTERM is a preemption notice while a
// checkpoint.Checkpointer lives), then exits as cli.Exit does: 75 for a
// preempted job.
func Main(name string, run func(ctx context.Context, args []string, out io.Writer) error) {
	ctx, stop := ddp.NotifyContext(context.Background())
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	cli.Exit(name, err)
}

// Run holds the flags every training example shares: how much of each
// epoch runs, how often progress is printed without a terminal, and what
// the run leaves behind. --checkpoint FILE is an export (the model and
// optimizer after each epoch, in one file, for another program or a fresh
// start with --resume); the job's own checkpoints, which it resumes from
// by itself, are ddp.Flags' --checkpoint-dir.
type Run struct {
	MaxSteps, LogInterval int
	Checkpoint, Plot      string
	Resume, Metrics       bool
}

// AddFlags adds the shared training flags to fs, to be parsed into r;
// logEvery is --log-interval's default.
func (r *Run) AddFlags(fs *pflag.FlagSet, logEvery int) {
	fs.IntVar(&r.MaxSteps, "max-steps", 0, "stop each epoch after this many steps (0: the whole epoch)")
	fs.IntVar(&r.LogInterval, "log-interval", logEvery, "steps between progress lines when the output is not a terminal")
	fs.StringVar(&r.Checkpoint, "checkpoint", "", "export the model and optimizer to this file after each epoch (to resume a stopped job, use --checkpoint-dir)")
	fs.BoolVar(&r.Resume, "resume", false, "start from the --checkpoint export (--checkpoint-dir resumes by itself)")
	fs.BoolVar(&r.Metrics, "metrics", false, "print xla.MetricsReport() at the end")
	fs.StringVar(&r.Plot, "plot", "", "draw the loss and accuracy curves to this PNG file")
}

// Check refuses what the shared flags cannot mean on their own or beside
// the launch's (the examples check --log-interval with their other
// sizes). On the process that writes them (rank 0), the directories of
// --plot and --checkpoint must exist and take files now, not after hours
// of training.
func (r Run) Check(launch ddp.Options) error {
	switch {
	case r.MaxSteps < 0:
		return fmt.Errorf("--max-steps=%d: cannot be negative", r.MaxSteps)
	case r.Resume && launch.Checkpoints.Dir != "":
		return errors.New("--resume with --checkpoint-dir: the latter resumes by itself from its latest checkpoint; drop --resume")
	case r.Resume && r.Checkpoint == "":
		return errors.New("--resume needs --checkpoint FILE")
	case r.Plot != "" && !strings.EqualFold(filepath.Ext(r.Plot), ".png"):
		return fmt.Errorf("--plot %s: the plot is a PNG: name a .png file", r.Plot)
	}
	if !writesOutputs() {
		return nil
	}
	for _, out := range []struct{ flag, path string }{{"--plot", r.Plot}, {"--checkpoint", r.Checkpoint}} {
		if out.path == "" {
			continue
		}
		if err := checkWritableDir(filepath.Dir(out.path)); err != nil {
			return fmt.Errorf("%s %s: %w", out.flag, out.path, err)
		}
	}
	return nil
}

// CheckCheckpointKind refuses an existing --checkpoint of the other kind,
// or one a save would wrongly replace (a device, a FIFO, a link), before
// training: a sharded optimizer's (--zero) is a directory, a plain
// one's a file, and finding out at the first save or at --resume would
// cost the run.
func (r Run) CheckCheckpointKind(sharded bool) error {
	if r.Checkpoint == "" {
		return nil
	}
	info, err := os.Lstat(r.Checkpoint)
	switch {
	case err != nil:
		return nil // created by the first save; --resume says it is missing
	case info.IsDir() && !sharded:
		return fmt.Errorf("--checkpoint %s is a directory, as --zero saves them: resume it with --zero, or name a file", r.Checkpoint)
	case info.IsDir():
		return nil
	case sharded && info.Mode().IsRegular():
		return fmt.Errorf("--checkpoint %s is a file, a checkpoint saved without --zero: resume it without --zero, or name a directory for --zero's", r.Checkpoint)
	}
	if err := checkpoint.CheckFileTarget(r.Checkpoint); err != nil {
		return fmt.Errorf("--checkpoint: %w", err)
	}
	return nil
}

// OpenLoop is replica w's training loop over order (training.Open: resumed
// from --checkpoint-dir), started from the --checkpoint export with
// --resume; rank 0 says on out where it resumed.
func (r Run) OpenLoop(ctx context.Context, w ddp.Worker, order training.Order, state optim.Checkpoint, out io.Writer) (*training.Loop, error) {
	loop, err := training.Open(ctx, w, order, state)
	if err != nil {
		return nil, err
	}
	if r.Resume {
		if err := loop.LoadFile(ctx, r.Checkpoint); err != nil {
			return nil, errors.Join(fmt.Errorf("--resume: %w (a checkpoint resumes the same model and data flags only)", err), loop.Close())
		}
	}
	if w.Rank == 0 && loop.Resumed() != "" {
		fmt.Fprintln(out, loop.Resumed())
	}
	if w.Rank == 0 && loop.Resumed() == "" {
		if restart, _ := strconv.Atoi(os.Getenv(workerenv.RestartCount)); restart > 0 {
			where := "no --checkpoint-dir"
			if w.Checkpoints.Dir != "" {
				where = "none in --checkpoint-dir " + w.Checkpoints.Dir
			}
			fmt.Fprintf(out, "note: restart %d of the job, with no checkpoint to resume from (%s): training starts from step 0\n", restart, where)
		}
	}
	return loop, nil
}

// Export writes the --checkpoint file at the end of epoch (every replica
// takes part; checkpoint.Save writes rank 0's file).
func (r Run) Export(ctx context.Context, loop *training.Loop, epoch int) error {
	if r.Checkpoint == "" {
		return nil
	}
	state := loop.State()
	state.Epoch, state.Step = epoch+1, loop.Position().Step
	return checkpoint.Save(ctx, r.Checkpoint, state)
}

// Finish is rank 0's end of a run: xla.MetricsReport() with --metrics,
// and the curves drawn to --plot.
func (r Run) Finish(out io.Writer, curves *report.Curves) error {
	if r.Metrics {
		fmt.Fprint(out, xla.MetricsReport())
	}
	if r.Plot == "" {
		return nil
	}
	if err := curves.WritePNG(r.Plot); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s\n", r.Plot)
	return nil
}

// writesOutputs reports whether this process is the job's rank 0, which
// writes the plot and the checkpoint: one started alone or with --spawn
// (no rank set), or rank 0 of a launcher's job.
func writesOutputs() bool {
	w, err := workerenv.Parse(os.Getenv)
	// A malformed placement fails the launch itself; write nothing here.
	return err == nil && w.IsRankZero()
}

// checkWritableDir makes sure a file can be created in dir.
func checkWritableDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("its directory: %w (create it first)", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".xladdp-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// TutorialBatch is the global batch of an example whose --batch-size is
// per replica, as its tutorial's, for a job of replicas; with
// --deterministic it is the global batch, cut into micro-shards of
// microShard unless --micro-shard says otherwise.
func TutorialBatch(mode ddp.Mode, batchSize, replicas, microShard int, seed uint64) ddp.Batch {
	global := batchSize
	if !mode.Deterministic {
		global *= replicas
	}
	return ddp.Batch{Global: global, MicroShard: microShard, Seed: seed}
}

// PerReplica is each of parts' share of --batch-size global: the global
// batch split evenly, as the examples that take a global batch do. A
// global batch that does not divide is rounded down to a multiple of
// parts, and rank 0 says so on out (what names the parts: "6 replicas",
// "2 replicas × 4 micro-steps"), never silently.
func PerReplica(out io.Writer, rank0 bool, global, parts int, what string) int {
	share := global / parts
	if rank0 && share > 0 && global%parts != 0 {
		fmt.Fprintf(out, "note: --batch-size %d does not divide over %s: each takes %d, a global batch of %d\n",
			global, what, share, share*parts)
	}
	return share
}
