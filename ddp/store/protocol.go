package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// MaxMessageSize bounds one protocol message (a key list or a value).
const MaxMessageSize = 64 << 20

// Request operations.
const (
	opSet byte = iota + 1
	opGet
	opAdd
	opCompareSet
	opWait
	opDelete
	opNumKeys
	opCheck
)

// Response statuses.
const (
	statusOK byte = iota
	statusTimeout
	statusError
)

// request is one decoded client command. Keys, values and integers are
// encoded as: op (1 byte), then fields in op order: strings and byte
// slices as a 4-byte big-endian length and the bytes, integers as 8 bytes.
type request struct {
	op     byte
	keys   []string
	values [][]byte
	n      int64 // Add's delta; Get/Wait's timeout in milliseconds
}

// reader decodes fields from a payload, remembering the first error.
type reader struct {
	buf []byte
	err error
}

func (r *reader) bytes() []byte {
	if r.err != nil {
		return nil
	}
	if len(r.buf) < 4 {
		r.err = errors.New("truncated field length")
		return nil
	}
	n := binary.BigEndian.Uint32(r.buf)
	if uint64(n) > uint64(len(r.buf)-4) {
		r.err = fmt.Errorf("field of %d bytes with %d left", n, len(r.buf)-4)
		return nil
	}
	out := r.buf[4 : 4+n]
	r.buf = r.buf[4+n:]
	return out
}

func (r *reader) int64() int64 {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 8 {
		r.err = errors.New("truncated integer")
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.buf))
	r.buf = r.buf[8:]
	return v
}

// maxKeys bounds a Wait/Check key list.
const maxKeys = 1 << 16

func (r *reader) keys() []string {
	n := r.int64()
	if r.err == nil && (n < 0 || n > maxKeys) {
		r.err = fmt.Errorf("key count %d outside [0, %d]", n, maxKeys)
	}
	if r.err != nil {
		return nil
	}
	keys := make([]string, 0, n)
	for range n {
		keys = append(keys, string(r.bytes()))
	}
	return keys
}

// decodeRequest parses a request payload; any malformed input is an error.
func decodeRequest(payload []byte) (request, error) {
	if len(payload) == 0 {
		return request{}, errors.New("store: empty request")
	}
	req := request{op: payload[0]}
	r := &reader{buf: payload[1:]}
	switch req.op {
	case opSet:
		req.keys = []string{string(r.bytes())}
		req.values = [][]byte{r.bytes()}
	case opGet:
		req.keys = []string{string(r.bytes())}
		req.n = r.int64()
	case opAdd:
		req.keys = []string{string(r.bytes())}
		req.n = r.int64()
	case opCompareSet:
		req.keys = []string{string(r.bytes())}
		req.values = [][]byte{r.bytes(), r.bytes()}
	case opWait, opCheck:
		req.n = r.int64()
		req.keys = r.keys()
	case opDelete:
		req.keys = []string{string(r.bytes())}
	case opNumKeys:
	default:
		return request{}, fmt.Errorf("store: unknown operation %d", req.op)
	}
	if r.err != nil {
		return request{}, fmt.Errorf("store: malformed request (op %d): %w", req.op, r.err)
	}
	if len(r.buf) != 0 {
		return request{}, fmt.Errorf("store: %d trailing bytes after request (op %d)", len(r.buf), req.op)
	}
	return req, nil
}

// encoder builds a payload.
type encoder struct{ buf []byte }

func (e *encoder) bytes(b []byte) *encoder {
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(len(b)))
	e.buf = append(e.buf, b...)
	return e
}

func (e *encoder) str(s string) *encoder { return e.bytes([]byte(s)) }

func (e *encoder) int64(v int64) *encoder {
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
	return e
}

// writeFrame sends a length-prefixed message.
func writeFrame(w io.Writer, payload []byte) error {
	if len(payload) > MaxMessageSize {
		return fmt.Errorf("store: message of %d bytes exceeds the %d-byte limit", len(payload), MaxMessageSize)
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(payload)), uint32(len(payload)))
	_, err := w.Write(append(frame, payload...))
	return err
}

// readFrame reads one length-prefixed message, refusing oversized ones
// before allocating.
func readFrame(r io.Reader) ([]byte, error) { return readFrameLimit(r, MaxMessageSize) }

// readChunk is how much of a message is allocated before its bytes arrive.
const readChunk = 64 << 10

// readFrameLimit reads one message of at most limit bytes. Memory grows
// with the bytes that actually arrive, not with the length a peer
// declares, so a peer that claims 64 MiB and sends nothing costs nothing.
func readFrameLimit(r io.Reader, limit int) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if n > limit {
		return nil, fmt.Errorf("store: message of %d bytes exceeds the %d-byte limit", n, limit)
	}
	payload := make([]byte, 0, min(n, readChunk))
	for len(payload) < n {
		chunk := min(n-len(payload), readChunk)
		payload = slices.Grow(payload, chunk)
		m, err := io.ReadFull(r, payload[len(payload):len(payload)+chunk])
		payload = payload[:len(payload)+m]
		if err != nil {
			return nil, err
		}
	}
	return payload, nil
}
