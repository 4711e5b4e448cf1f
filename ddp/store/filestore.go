package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// FileStore keeps the store in a file shared by processes (on one host or
// a shared filesystem): an append-only log of changes, replayed under an
// exclusive flock on every operation. The last process to Close removes the
// file, as torch's FileStore does.
type FileStore struct {
	path string
}

// filePollInterval paces Get and Wait on a FileStore.
const filePollInterval = 10 * time.Millisecond

// usersKey counts the processes that have the file open.
const usersKey = "__xladdp_file_store_users"

type fileRecord struct {
	Op    string `json:"op"` // "set" or "del"
	Key   string `json:"k"`
	Value []byte `json:"v,omitempty"`
}

// OpenFileStore opens (creating if needed) the store file at path.
func OpenFileStore(ctx context.Context, path string) (*FileStore, error) {
	f := &FileStore{path: path}
	if _, err := f.Add(ctx, usersKey, 1); err != nil {
		return nil, err
	}
	return f, nil
}

// locked runs fn on the replayed state under an exclusive lock; fn returns
// the records to append.
func (f *FileStore) locked(fn func(state map[string][]byte) []fileRecord) error {
	file, err := os.OpenFile(f.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("store: file store: %w (the init file must be on a filesystem every rank can write)", err)
	}
	defer file.Close()
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("store: locking %s: %w", f.path, err)
	}
	defer syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
	state := map[string][]byte{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64*1024), MaxMessageSize*2)
	line := 0
	for sc.Scan() {
		line++
		var rec fileRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("store: %s line %d is corrupt (%v): delete the file and restart every rank", f.path, line, err)
		}
		if rec.Op == "del" {
			delete(state, rec.Key)
		} else {
			state[rec.Key] = rec.Value
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("store: reading %s: %w", f.path, err)
	}
	records := fn(state)
	if len(records) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for _, r := range records {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf.Write(append(b, '\n'))
	}
	if _, err := file.Seek(0, 2); err != nil {
		return err
	}
	if _, err := file.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("store: writing %s: %w", f.path, err)
	}
	return file.Sync()
}

// Set stores value under key.
func (f *FileStore) Set(_ context.Context, key string, value []byte) error {
	return f.locked(func(map[string][]byte) []fileRecord {
		return []fileRecord{{Op: "set", Key: key, Value: value}}
	})
}

// Add adds delta to the counter at key.
func (f *FileStore) Add(_ context.Context, key string, delta int64) (int64, error) {
	var result int64
	var opErr error
	err := f.locked(func(state map[string][]byte) []fileRecord {
		if v, ok := state[key]; ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				opErr = fmt.Errorf("store: Add on key %q holding non-integer %q", key, v)
				return nil
			}
			result = n
		}
		result += delta
		return []fileRecord{{Op: "set", Key: key, Value: []byte(strconv.FormatInt(result, 10))}}
	})
	return result, errors.Join(err, opErr)
}

// CompareSet sets key to desired if it holds expected.
func (f *FileStore) CompareSet(_ context.Context, key string, expected, desired []byte) ([]byte, error) {
	var after []byte
	err := f.locked(func(state map[string][]byte) []fileRecord {
		current, found := state[key]
		if (!found && len(expected) == 0) || (found && bytes.Equal(current, expected)) {
			after = desired
			return []fileRecord{{Op: "set", Key: key, Value: desired}}
		}
		after = current
		return nil
	})
	return after, err
}

// Check reports which keys exist.
func (f *FileStore) Check(_ context.Context, keys ...string) ([]bool, error) {
	out := make([]bool, len(keys))
	err := f.locked(func(state map[string][]byte) []fileRecord {
		for i, k := range keys {
			_, out[i] = state[k]
		}
		return nil
	})
	return out, err
}

// Wait polls until every key exists or ctx's deadline (or DefaultTimeout).
func (f *FileStore) Wait(ctx context.Context, keys ...string) error {
	end := deadline(ctx)
	for {
		present, err := f.Check(ctx, keys...)
		if err != nil {
			return err
		}
		var missing []string
		for i, ok := range present {
			if !ok {
				missing = append(missing, keys[i])
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return &TimeoutError{Where: f.path, Missing: missing}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", &TimeoutError{Where: f.path, Missing: missing}, ctx.Err())
		case <-time.After(filePollInterval):
		}
	}
}

// Get waits for key and returns its value.
func (f *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := f.Wait(ctx, key); err != nil {
		return nil, err
	}
	var v []byte
	err := f.locked(func(state map[string][]byte) []fileRecord {
		v = state[key]
		return nil
	})
	return v, err
}

// Delete removes key.
func (f *FileStore) Delete(_ context.Context, key string) (bool, error) {
	var found bool
	err := f.locked(func(state map[string][]byte) []fileRecord {
		_, found = state[key]
		if !found {
			return nil
		}
		return []fileRecord{{Op: "del", Key: key}}
	})
	return found, err
}

// NumKeys counts the keys (not the store's own user counter).
func (f *FileStore) NumKeys(context.Context) (int64, error) {
	var n int64
	err := f.locked(func(state map[string][]byte) []fileRecord {
		n = int64(len(state))
		if _, ok := state[usersKey]; ok {
			n--
		}
		return nil
	})
	return n, err
}

// Close leaves the store; the last process removes the file.
func (f *FileStore) Close() error {
	users, err := f.Add(context.Background(), usersKey, -1)
	if err != nil {
		return err
	}
	if users <= 0 {
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

var _ Store = (*FileStore)(nil)
