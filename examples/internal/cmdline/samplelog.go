package cmdline

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/xladdp/xladdp/xla/data"
)

// SampleLog appends the dataset index of every training sample a replica
// uses, one per line, to DIR/replica-N.txt (--sample-log): a resumed run,
// on any replica count, adds its own, so the lines of all the files say
// which samples an epoch used and how often. Nil-safe: without the flag
// it writes nothing.
type SampleLog struct {
	f *os.File
	w *bufio.Writer
}

// OpenSampleLog opens global replica replica's file in dir ("" for none).
func OpenSampleLog(dir string, replica int) (*SampleLog, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("replica-%d.txt", replica)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--sample-log: %w (the directory must exist)", err)
	}
	return &SampleLog{f: f, w: bufio.NewWriter(f)}, nil
}

// Add records a step's samples, tagged with the epoch.
func (l *SampleLog) Add(epoch int, samples []int) error {
	if l == nil {
		return nil
	}
	for _, s := range samples {
		if _, err := fmt.Fprintln(l.w, strconv.Itoa(epoch)+" "+strconv.Itoa(s)); err != nil {
			return fmt.Errorf("--sample-log: %w", err)
		}
	}
	return nil
}

// AddAll records a step's batches' samples, tagged with the epoch.
func (l *SampleLog) AddAll(epoch int, batches []data.Batch) error {
	for _, b := range batches {
		if err := l.Add(epoch, b.Samples); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes and closes the file.
func (l *SampleLog) Close() error {
	if l == nil {
		return nil
	}
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
