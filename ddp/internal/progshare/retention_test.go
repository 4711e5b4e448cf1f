package progshare

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

// meter is a job's connections to one real store, each noting the keys
// it touched, so that a test can weigh what the store's host holds.
type meter struct {
	srv *store.Server
	st  store.Store // a connection of the test's own, for weighing

	mu      sync.Mutex
	touched map[string]bool
}

// conn is one process's connection, noting every key it touches.
type conn struct {
	store.Store
	m *meter
}

func (c conn) note(key string) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.touched[key] = true
}

func (c conn) Set(ctx context.Context, key string, value []byte) error {
	c.note(key)
	return c.Store.Set(ctx, key, value)
}

func (c conn) Add(ctx context.Context, key string, delta int64) (int64, error) {
	c.note(key)
	return c.Store.Add(ctx, key, delta)
}

func (c conn) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	c.note(key)
	return c.Store.CompareSet(ctx, key, expected, desired)
}

// meteredExchanges are world Exchanges over one real store on loopback,
// each over its own connection.
func meteredExchanges(t *testing.T, world int) ([]*Exchange, *meter) {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	dial := func() store.Store {
		c, err := store.Dial(t.Context(), srv.Addr(), "")
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	m := &meter{srv: srv, st: dial(), touched: map[string]bool{}}
	xs := make([]*Exchange, world)
	for r := range xs {
		xs[r] = &Exchange{st: conn{dial(), m}, rank: r, world: world, beat: 20 * time.Millisecond, stall: 5 * time.Second}
	}
	return xs, m
}

// held weighs what the store holds now under the keys the job touched:
// the keys that exist and their bytes.
func (m *meter) held(t *testing.T) (keys []string, size int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.touched {
		found, err := m.st.Check(t.Context(), key)
		require.NoError(t, err)
		if !found[0] {
			continue
		}
		v, err := m.st.Get(t.Context(), key)
		require.NoError(t, err)
		keys = append(keys, strings.TrimPrefix(key, programKey("p", "")))
		size += len(v)
	}
	return keys, size
}

// diskCache is a node's disk cache as the engine uses it
// (xla.programCache.lower): looked in before lowering, then again under
// the entry's lock, which the compiling process holds until it stored
// the program.
type diskCache struct {
	lock sync.Mutex
	mu   sync.Mutex
	file []byte
}

func (d *diskCache) load() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.file
}

func (d *diskCache) store(file []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.file = file
}

// need plays one process needing program p as the engine does: its disk
// first, then the job; whatever way it got the program, it says it has it.
// It returns the program and how it got it.
func need(ctx context.Context, x *Exchange, disk *diskCache, compile func() []byte) ([]byte, string, error) {
	if file := disk.load(); file != nil {
		x.Have(ctx, "p")
		return file, "disk", nil
	}
	disk.lock.Lock()
	defer disk.lock.Unlock()
	if file := disk.load(); file != nil {
		x.Have(ctx, "p")
		return file, "disk", nil
	}
	first, done, err := x.Claim(ctx, "p")
	if err != nil {
		return nil, "", err
	}
	if first {
		file := compile()
		disk.store(file)
		done(file)
		return file, "compiled", nil
	}
	file, err := x.Fetch(ctx, "p")
	if err != nil {
		return nil, "", fmt.Errorf("rank %d: %w", x.rank, err)
	}
	disk.store(file)
	x.Have(ctx, "p") // an engine may say so again: it counts once
	return file, "fetched", nil
}

// TestStoreExchangeFreesTheProgramInEveryLayout: however a job's
// processes lie on nodes, each node's ranks sharing a disk cache, and
// whichever nodes already have the program on disk, one process compiles
// it, and once every process has it (from the job, its disk, or its own
// compilation) the store holds none of its chunks: nothing but the
// program's counters and its manifest marked gone, a few bytes.
func TestStoreExchangeFreesTheProgramInEveryLayout(t *testing.T) {
	file := program(programChunk + 1) // two chunks
	for _, tc := range []struct {
		name          string
		nodes, ranks  int
		warm          []int // nodes whose disk has the program already
		want          map[string]int
		wantPublished bool
	}{
		{"8 nodes of 1", 8, 1, nil, map[string]int{"compiled": 1, "fetched": 7}, true},
		{"2 nodes of 4", 2, 4, nil, map[string]int{"compiled": 1, "fetched": 1, "disk": 6}, true},
		{"1 node of 8", 1, 8, nil, map[string]int{"compiled": 1, "disk": 7}, true},
		{"4 nodes of 2, one warm", 4, 2, []int{3}, map[string]int{"compiled": 1, "fetched": 2, "disk": 5}, true},
		{"2 nodes of 4, one warm", 2, 4, []int{1}, map[string]int{"compiled": 1, "disk": 7}, true},
		{"every node warm", 2, 4, []int{0, 1}, map[string]int{"disk": 8}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs, m := meteredExchanges(t, tc.nodes*tc.ranks)
			before, err := m.st.NumKeys(t.Context())
			require.NoError(t, err)
			disks := make([]*diskCache, tc.nodes)
			for n := range disks {
				disks[n] = &diskCache{}
			}
			for _, n := range tc.warm {
				disks[n].store(file)
			}
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for r, x := range xs {
				wg.Go(func() {
					f, how, err := need(t.Context(), x, disks[r/tc.ranks], func() []byte {
						time.Sleep(100 * time.Millisecond) // compiling, beating
						return file
					})
					mu.Lock()
					defer mu.Unlock()
					if assert.NoError(t, err) {
						assert.True(t, bytes.Equal(file, f), "rank %d got what was compiled", r)
						got[how]++
					}
				})
			}
			wg.Wait()
			assert.Equal(t, tc.want, got)
			keys, size := m.held(t)
			assert.ElementsMatch(t, wantLeft(tc.wantPublished), keys, "only the counters and the gone manifest are left")
			assert.Less(t, size, 256, "bytes left in the store")
			after, err := m.st.NumKeys(t.Context())
			require.NoError(t, err)
			assert.Equal(t, before+int64(len(keys)), after, "no key the meter missed")
		})
	}
}

// wantLeft is what a program leaves in the store once every process has
// it: who claimed it, the compiler's beats, who has it, and a manifest
// that says it is gone (a latecomer compiles for itself, publishing
// nothing). A program nobody claimed leaves only who has it.
func wantLeft(published bool) []string {
	if !published {
		return []string{"have"}
	}
	return []string{"claim", "beat", "have", "manifest"}
}

// TestStoreExchangeCountsEachProcessOnce: a process that says it has the
// program again, or after fetching it, is counted once: the chunks stay
// until the job's last process has it.
func TestStoreExchangeCountsEachProcessOnce(t *testing.T) {
	xs, m := meteredExchanges(t, 3)
	file := program(3 << 20)
	first, done, err := xs[0].Claim(t.Context(), "p")
	require.NoError(t, err)
	require.True(t, first)
	done(file)
	xs[0].Have(t.Context(), "p")
	_, err = xs[1].Fetch(t.Context(), "p")
	require.NoError(t, err)
	xs[1].Have(t.Context(), "p")
	xs[1].Have(t.Context(), "p")
	keys, _ := m.held(t)
	assert.Contains(t, keys, "chunk/0", "rank 2 has not got it yet")
	xs[2].Have(t.Context(), "p") // from its disk
	keys, _ = m.held(t)
	assert.NotContains(t, keys, "chunk/0")
	_, err = xs[1].Fetch(t.Context(), "p")
	assert.ErrorContains(t, err, "no longer holds it", "a latecomer compiles for itself")
}
