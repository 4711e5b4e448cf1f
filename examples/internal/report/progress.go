package report

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// Progress shows one epoch's steps: a bar with the step, loss, samples/s
// and ETA on a terminal, else a line after the first step and every Every
// steps. A nil *Progress
// (ranks other than 0) shows nothing.
type Progress struct {
	out     io.Writer
	bar     *progressbar.ProgressBar
	total   int
	every   int
	start   time.Time
	samples int
	// base is the epoch's steps done before this run (a resume): the
	// ETA counts only the steps run here.
	base   int
	prefix string
	// Unit names what Step's samples count ("samples" when empty).
	Unit string
}

// NewProgress starts showing an epoch of total steps on out; title names
// it ("epoch 1/3").
func NewProgress(out io.Writer, title string, total, every int) *Progress {
	p := &Progress{out: out, total: total, every: max(every, 1), start: time.Now(), prefix: title}
	if f, ok := out.(*os.File); ok && barFits(term.IsTerminal(int(f.Fd())), os.Getenv) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(out), progressbar.OptionSetDescription(title),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(),
			progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond))
	}
	return p
}

// barFits reports whether a bar redrawn in place shows: on a terminal,
// but not a rank's under mpirun, whose pty mpirun relays line by line
// (the bar would show its first frame, "0% (0/3)", and nothing after).
func barFits(terminal bool, getenv func(string) string) bool {
	return terminal && getenv(workerenv.OpenMPIWorldSize) == ""
}

// Step records that step (1-based) is done with loss, having trained
// samples more samples.
func (p *Progress) Step(step int, loss float64, samples int) {
	if p == nil {
		return
	}
	p.samples += samples
	rate := float64(p.samples) / max(time.Since(p.start).Seconds(), 1e-9)
	unit := p.Unit
	if unit == "" {
		unit = "samples"
	}
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%s loss %.4f %.0f %s/s", p.prefix, loss, rate, unit))
		_ = p.bar.Set(step)
		return
	}
	// The first step too: a slow model (ResNet-18 on a CPU) shows it is
	// running at once, not after its first Every steps.
	if step == 1 || step%p.every == 0 || step == p.total {
		eta := time.Duration(float64(time.Since(p.start)) / float64(max(step-p.base, 1)) * float64(p.total-step)).Round(time.Second)
		fmt.Fprintf(p.out, "%s step %d/%d loss %.4f %.0f %s/s eta %v\n", p.prefix, step, p.total, loss, rate, unit, eta)
	}
}

// ResumedAt says the epoch resumed after step steps (0: from its start):
// the rate and ETA count only the steps run from here. Step's samples
// must count only those too.
func (p *Progress) ResumedAt(step int) {
	if p != nil {
		p.base = step
	}
}

// Note prints a line between steps (a val loss), above the bar on a
// terminal.
func (p *Progress) Note(line string) {
	if p == nil {
		return
	}
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintln(p.out, line)
}

// Done ends the epoch's display.
func (p *Progress) Done() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
	}
}
