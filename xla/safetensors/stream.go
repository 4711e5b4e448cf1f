package safetensors

import (
	"fmt"
	"io"
)

// Source is a tensor whose data is read when its file is written: Read
// copies it into dst, exactly its size.
type Source struct {
	Layout
	Read func(dst []byte) error
}

// Streamer writes files from Sources one tensor at a time, through one
// buffer it keeps from file to file (the largest tensor's size): a file
// is never whole in memory, and once warm writing one allocates nothing.
// A Streamer is not safe for concurrent use.
type Streamer struct {
	buf []byte
}

// WriteFile writes path atomically, as WriteAtomic does, with meta and
// the sources' tensors in order.
func (s *Streamer) WriteFile(path string, meta map[string]string, sources []Source) error {
	layout := make([]Layout, len(sources))
	for i, src := range sources {
		layout[i] = src.Layout
	}
	sizes, err := dataSizes(layout)
	if err != nil {
		return err
	}
	head, err := encodeHeader(meta, layout, sizes)
	if err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := w.Write(head); err != nil {
			return err
		}
		for i, src := range sources {
			if cap(s.buf) < sizes[i] {
				s.buf = make([]byte, sizes[i])
			}
			data := s.buf[:sizes[i]]
			if err := src.Read(data); err != nil {
				return fmt.Errorf("reading tensor %q: %w", src.Name, err)
			}
			if _, err := w.Write(data); err != nil {
				return err
			}
		}
		return nil
	})
}

// Release lets go of the buffer.
func (s *Streamer) Release() { s.buf = nil }
