package readlimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// ErrTooLarge is wrapped by ReadFile's error for a file over its limit.
var ErrTooLarge = errors.New("over the size limit")

// chunk is how much one read asks for: memory grows by at most this much
// past what was read.
const chunk = 4 << 20

// ReadFile returns path's contents, at most limit bytes: a longer file is
// refused with ErrTooLarge after reading limit+1 bytes at the most, in
// chunks, never holding more than limit plus one chunk while it reads. reject, when
// set, sees each chunk as it is read and may refuse the file early (a
// text that holds NUL bytes). When ctx ends, the open (a FIFO waits for
// a writer) and the reads stop and ReadFile returns ctx's cause.
func ReadFile(ctx context.Context, path string, limit int64, reject func(chunk []byte) error) ([]byte, error) {
	f, err := open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { _ = f.Close() }) // unblocks a pipe's read
	defer stop()
	// Chunks, joined once at the end: a file of unknown size (a device,
	// a pipe) never makes the buffer double past the limit.
	var chunks [][]byte
	total := int64(0)
	for {
		if total > limit {
			return nil, fmt.Errorf("%s: %w of %s", path, ErrTooLarge, sizeOf(limit))
		}
		buf := make([]byte, min(int64(chunk), limit+1-total))
		n, err := io.ReadFull(f, buf)
		if reject != nil && n > 0 {
			if rerr := reject(buf[:n]); rerr != nil {
				return nil, fmt.Errorf("%s: %w", path, rerr)
			}
		}
		chunks, total = append(chunks, buf[:n]), total+int64(n)
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("reading %s: %w", path, context.Cause(ctx))
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			if total > limit {
				return nil, fmt.Errorf("%s: %w of %s", path, ErrTooLarge, sizeOf(limit))
			}
			return bytes.Join(chunks, nil), nil
		case err != nil:
			return nil, err
		}
	}
}

// open opens path for reading. A FIFO's open blocks until a writer
// comes; when ctx ends first, a writer of our own is opened and closed
// at once, so the blocked open returns (and its file reads EOF) and no
// goroutine is left behind.
func open(ctx context.Context, path string) (*os.File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Mode()&fs.ModeNamedPipe == 0 {
		return os.Open(path)
	}
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		return o.f, o.err
	case <-ctx.Done():
	}
	for {
		// Fails (ENXIO) until the goroutine's open has begun waiting.
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
		select {
		case o := <-done:
			if o.f != nil {
				_ = o.f.Close()
			}
			return nil, fmt.Errorf("opening %s (a FIFO no process writes to): %w", path, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// OpenRegular opens path for reading if it is a regular file (a link to
// one included), and refuses anything else by name and kind before
// anything could block or stream: a FIFO (whose open waits for a
// writer), a device (/dev/zero never ends), a socket, a directory.
func OpenRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = fmt.Errorf("%s is %s, not a regular file", path, KindOf(info.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckRegular refuses path unless it is a regular file, as OpenRegular
// does: for a file another library opens (dlopen blocks on a FIFO).
func CheckRegular(path string) error {
	f, err := OpenRegular(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// KindOf names a file mode's kind: "a FIFO", "a directory", ….
func KindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "of mode " + m.Type().String()
}

// sizeOf says a limit in MiB, or KiB under one MiB.
func sizeOf(limit int64) string {
	if limit < 1<<20 {
		return fmt.Sprintf("%d KiB", limit>>10)
	}
	return fmt.Sprintf("%d MiB", limit>>20)
}
