package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// Store is the rendezvous key-value store.
type Store interface {
	// Set stores value under key, replacing any previous value.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns key's value, waiting until the key exists.
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the integer counter at key (created at 0) and
	// returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareSet sets key to desired if its value is expected (a missing key
	// matches an empty expected) and returns the value the key holds after.
	CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Wait returns once every key exists.
	Wait(ctx context.Context, keys ...string) error
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// NumKeys returns how many keys exist.
	NumKeys(ctx context.Context) (int64, error)
	// Check reports which of keys exist, without waiting.
	Check(ctx context.Context, keys ...string) ([]bool, error)
	Close() error
}

// EnvToken is the shared secret clients must prove to the TCP store.
const EnvToken = "XLADDP_STORE_TOKEN"

// DefaultTimeout bounds a blocking operation whose context has no deadline.
const DefaultTimeout = 5 * time.Minute

// ErrConnectionLost is returned (wrapped) when the connection to the TCP
// store broke: usually its host process exited.
var ErrConnectionLost = errors.New("store: connection lost")

// ErrTimeout is returned (wrapped, as a *TimeoutError) when keys did not
// appear in time.
var ErrTimeout = errors.New("store: timed out")

// TimeoutError lists the keys still missing when a wait timed out.
type TimeoutError struct {
	Where   string // the store's address or file
	Missing []string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%v at %s waiting for keys %q", ErrTimeout, e.Where, e.Missing)
}

func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// TokenFromEnv returns $XLADDP_STORE_TOKEN.
func TokenFromEnv() string { return os.Getenv(EnvToken) }

// deadline returns ctx's deadline, or now+DefaultTimeout.
func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(DefaultTimeout)
}
