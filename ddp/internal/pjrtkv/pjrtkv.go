package pjrtkv

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/xladdp/xladdp/ddp/store"
)

// MaxValue bounds a value put or got: a plugin's runtime shares ids and
// topologies (NCCL's unique id is 128 bytes), never bulk data.
const MaxValue = 8 << 20

// ErrRefused: a value was too large or not sealed for its key and scope.
var ErrRefused = errors.New("pjrtkv: value refused")

// magic starts every sealed value.
var magic = []byte("xladdp-pjrt-kv/1\n")

// Store is the job's store as a plugin's distributed runtime sees it
// (backend.KeyValueStore).
type Store struct {
	st    store.Store
	scope string
	token []byte
}

// New serves keys under the job's run id and attempt (its restart count)
// in st; token (the job's store token, or "") keys the seals.
func New(st store.Store, runID string, attempt int, token string) *Store {
	return &Store{st: st, scope: fmt.Sprintf("xladdp/pjrt-kv/%s/%d/", runID, attempt), token: []byte(token)}
}

// Put seals value for key and sets it.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	if len(value) > MaxValue {
		return fmt.Errorf("%w: %d bytes for %q, over %d", ErrRefused, len(value), key, MaxValue)
	}
	return s.st.Set(ctx, s.scope+key, s.seal(key, value))
}

// Get waits for key (until ctx ends) and returns its value, unsealed.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	sealed, err := s.st.Get(ctx, s.scope+key)
	if err != nil {
		if errors.Is(err, store.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded) // the plugin is told its deadline passed
		}
		return nil, err
	}
	return s.open(key, sealed)
}

// TryGet returns key's value, or found false at once where it is unset.
func (s *Store) TryGet(ctx context.Context, key string) ([]byte, bool, error) {
	there, err := s.st.Check(ctx, s.scope+key)
	if err != nil || !there[0] {
		return nil, false, err
	}
	v, err := s.Get(ctx, key)
	return v, err == nil, err
}

// mac binds value to its key and scope.
func (s *Store) mac(key string, value []byte) []byte {
	m := hmac.New(sha256.New, s.token)
	m.Write([]byte(s.scope))
	m.Write([]byte{0})
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write(value)
	return m.Sum(nil)
}

func (s *Store) seal(key string, value []byte) []byte {
	out := make([]byte, 0, len(magic)+sha256.Size+len(value))
	out = append(append(append(out, magic...), s.mac(key, value)...), value...)
	return out
}

func (s *Store) open(key string, sealed []byte) ([]byte, error) {
	body, ok := bytes.CutPrefix(sealed, magic)
	switch {
	case !ok || len(body) < sha256.Size:
		return nil, fmt.Errorf("%w: %q holds %d bytes not written by this job's key-value callbacks", ErrRefused, key, len(sealed))
	case len(body)-sha256.Size > MaxValue:
		return nil, fmt.Errorf("%w: %q holds %d bytes, over %d", ErrRefused, key, len(body)-sha256.Size, MaxValue)
	}
	value := body[sha256.Size:]
	if !hmac.Equal(body[:sha256.Size], s.mac(key, value)) {
		return nil, fmt.Errorf("%w: %q holds a value sealed for another key, attempt or job", ErrRefused, key)
	}
	return value, nil
}

// Key is the store key a served key is kept under.
func (s *Store) Key(key string) string { return s.scope + key }
