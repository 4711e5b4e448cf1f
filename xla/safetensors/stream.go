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
	head, sizes, err := headerOf(meta, sources)
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

// headerOf is the file's header for meta and sources, and each tensor's
// data size.
func headerOf(meta map[string]string, sources []Source) (head []byte, sizes []int, err error) {
	layout := make([]Layout, len(sources))
	for i, src := range sources {
		layout[i] = src.Layout
	}
	if sizes, err = dataSizes(layout); err != nil {
		return nil, nil, err
	}
	head, err = encodeHeader(meta, layout, sizes)
	return head, sizes, err
}

// EncodeSources is the file WriteFile would write, in memory: meta and
// the sources' tensors in order (a state handed to a peer, not a disk).
func EncodeSources(meta map[string]string, sources []Source) ([]byte, error) {
	head, sizes, err := headerOf(meta, sources)
	if err != nil {
		return nil, err
	}
	total := len(head)
	for _, n := range sizes {
		total += n
	}
	out := make([]byte, len(head), total)
	copy(out, head)
	for i, src := range sources {
		start := len(out)
		out = out[:start+sizes[i]]
		if err := src.Read(out[start:]); err != nil {
			return nil, fmt.Errorf("reading tensor %q: %w", src.Name, err)
		}
	}
	return out, nil
}

// Release lets go of the buffer.
func (s *Streamer) Release() { s.buf = nil }
