package procset

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// outputDrain is how long a reaped process's output is read on while a
// process it started keeps the pipes open.
const outputDrain = 500 * time.Millisecond

// Output is a started process's stdout and stderr, copied line by
// line by two goroutines.
type Output struct {
	readers [2]*os.File
	copying sync.WaitGroup
}

// StartWithOutput starts cmd with its stdout and stderr copied, a line per
// Write, to stdout and stderr. They are our own pipes, not
// cmd.StdoutPipe's, so that Wait reaps the process without waiting for
// its output, which a child of it may hold open long after it exited.
func StartWithOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*Output, error) {
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
	o := &Output{readers: [2]*os.File{stdoutR, stderrR}}
	o.copying.Add(2)
	go CopyLines(&o.copying, stdoutR, stdout)
	go CopyLines(&o.copying, stderrR, stderr)
	return o, nil
}

// Drain, once the process has exited, reads what it wrote until EOF, or
// for outputDrain if a child of it still holds the pipes, then abandons
// them; the copying goroutines have ended when it returns.
func (o *Output) Drain() {
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

// MaxOutputLine is the longest line copyLines writes whole; a longer one
// is cut into lines of this length.
const MaxOutputLine = 1 << 20

// CopyLines copies r to w one whole line per Write (a newline added to
// an unfinished last line), until EOF or r's read deadline.
func CopyLines(wg *sync.WaitGroup, r io.Reader, w io.Writer) {
	defer wg.Done()
	br := bufio.NewReaderSize(r, MaxOutputLine)
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
