package store

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// The server's operations, one a request: each takes the lock for what it
// reads and changes and answers the status and the operation's result.

func (s *Server) set(req request) []byte {
	s.mu.Lock()
	s.data[req.keys[0]] = bytes.Clone(req.values[0])
	s.notifyLocked()
	s.mu.Unlock()
	return []byte{statusOK}
}

// add adds req.n to the integer at the key (0 where none) and answers the
// sum; a key holding something else is an error.
func (s *Server) add(req request) []byte {
	s.mu.Lock()
	current := int64(0)
	if v, found := s.data[req.keys[0]]; found {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			s.mu.Unlock()
			return append([]byte{statusError}, fmt.Sprintf("store: Add on key %q holding non-integer %q", req.keys[0], v)...)
		}
		current = n
	}
	current += req.n
	s.data[req.keys[0]] = []byte(strconv.FormatInt(current, 10))
	s.notifyLocked()
	s.mu.Unlock()
	return (&encoder{buf: []byte{statusOK}}).int64(current).buf
}

// compareSet sets the key to the desired value where it holds the
// expected one (or is missing and nothing is expected), and answers what
// it holds then.
func (s *Server) compareSet(req request) []byte {
	s.mu.Lock()
	key, expected, desired := req.keys[0], req.values[0], req.values[1]
	current, found := s.data[key]
	if (!found && len(expected) == 0) || (found && bytes.Equal(current, expected)) {
		s.data[key] = bytes.Clone(desired)
		current = s.data[key]
		s.notifyLocked()
	}
	out := (&encoder{buf: []byte{statusOK}}).bytes(current).buf
	s.mu.Unlock()
	return out
}

// deleteKey answers how many keys it deleted, 0 or 1.
func (s *Server) deleteKey(req request) []byte {
	s.mu.Lock()
	_, found := s.data[req.keys[0]]
	delete(s.data, req.keys[0])
	if found {
		s.notifyLocked()
	}
	s.mu.Unlock()
	n := int64(0)
	if found {
		n = 1
	}
	return (&encoder{buf: []byte{statusOK}}).int64(n).buf
}

func (s *Server) numKeys() []byte {
	s.mu.Lock()
	n := int64(len(s.data))
	s.mu.Unlock()
	return (&encoder{buf: []byte{statusOK}}).int64(n).buf
}

// check answers a byte a key: 1 where it exists.
func (s *Server) check(req request) []byte {
	s.mu.Lock()
	out := []byte{statusOK}
	for _, k := range req.keys {
		_, found := s.data[k]
		b := byte(0)
		if found {
			b = 1
		}
		out = append(out, b)
	}
	s.mu.Unlock()
	return out
}

// await waits until every key exists (answering the first one's value
// for opGet), the server closes, or req.n milliseconds pass (answering
// the keys still missing).
func (s *Server) await(req request) []byte {
	timeout := time.Duration(req.n) * time.Millisecond
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		missing := s.missingLocked(req.keys)
		if s.closed {
			s.mu.Unlock()
			return append([]byte{statusError}, "store: server closed"...)
		}
		if len(missing) == 0 {
			out := []byte{statusOK}
			if req.op == opGet {
				out = (&encoder{buf: []byte{statusOK}}).bytes(s.data[req.keys[0]]).buf
			}
			s.mu.Unlock()
			return out
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			e := &encoder{buf: []byte{statusTimeout}}
			e.int64(int64(len(missing)))
			for _, k := range missing {
				e.str(k)
			}
			return e.buf
		}
	}
}
