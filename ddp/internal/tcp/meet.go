package tcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/quote"
)

// Meeting is what the ranks' meeting in the store gives each of them.
type Meeting struct {
	// Addrs and Hosts are every rank's listening address and host name.
	Addrs, Hosts []string
	// GroupID is rank 0's random id of this group.
	GroupID []byte
}

// Keys of the meeting in the store.
const (
	// rendezvousFailedKey holds why the rendezvous cannot succeed (a rank
	// claimed twice); every waiting rank checks it.
	rendezvousFailedKey = "rendezvous/failed"
	joinedKey           = "rendezvous/joined"
	allJoinedKey        = "rendezvous/all"
	tableKey            = "rendezvous/table"
)

// Meet registers rank in the store (claimed once, the world size agreed),
// publishes self ("HOST:PORT hostname"), and returns every rank's once all
// have joined. Each rank makes a constant number of calls: it counts
// itself in, and the last to join says so; rank 0 then reads the N
// addresses and publishes them as one table, which the others read. (The
// first version had every rank wait on and read all N keys: N² calls.)
// identity names this process in the error a rank claimed twice gives;
// within is the wait ctx allows, for the error naming the ranks that
// never joined.
func Meet(ctx context.Context, st store.Store, rank, size int, self, identity string, within time.Duration) (Meeting, error) {
	w := waiter{st: st, rank: rank, size: size, within: within}
	got, err := st.CompareSet(ctx, fmt.Sprintf("rank/%d", rank), nil, []byte(identity))
	if err != nil {
		return Meeting{}, fmt.Errorf("ddp: rank %d registering: %w", rank, err)
	}
	if string(got) != identity {
		err := fmt.Errorf("ddp: rank %d is claimed twice: by %s and by this process, %s: two processes were given RANK=%d "+
			"(with file://, a stale init file also does this: delete it)", rank, quote.Bytes(got), identity, rank)
		// Tell every rank, the first claimant included, instead of leaving
		// them to wait out the timeout.
		_, _ = st.CompareSet(ctx, rendezvousFailedKey, nil, []byte(err.Error()))
		return Meeting{}, err
	}
	ws, err := st.CompareSet(ctx, "world_size", nil, []byte(strconv.Itoa(size)))
	if err != nil {
		return Meeting{}, fmt.Errorf("ddp: rank %d registering: %w", rank, err)
	}
	if string(ws) != strconv.Itoa(size) {
		return Meeting{}, fmt.Errorf("ddp: rank %d has WORLD_SIZE=%d but another rank registered WORLD_SIZE=%s", rank, size, quote.Bytes(ws))
	}
	if err := st.Set(ctx, addrKey(rank), []byte(self)); err != nil {
		return Meeting{}, err
	}
	joined, err := st.Add(ctx, joinedKey, 1)
	if err != nil {
		return Meeting{}, err
	}
	if joined == int64(size) {
		if err := st.Set(ctx, allJoinedKey, []byte("1")); err != nil {
			return Meeting{}, err
		}
	}
	if rank == 0 {
		if err := w.publishTable(ctx); err != nil {
			return Meeting{}, err
		}
	}
	if err := w.wait(ctx, tableKey); err != nil {
		return Meeting{}, err
	}
	table, err := st.Get(ctx, tableKey)
	if err != nil {
		return Meeting{}, err
	}
	return parseTable(table, size)
}

func addrKey(rank int) string { return fmt.Sprintf("addr/%d", rank) }

// waiter waits in the store for the meeting's keys.
type waiter struct {
	st         store.Store
	rank, size int
	within     time.Duration
}

// publishTable is rank 0's: once every rank joined, their addresses as
// one value (the group id on its first line).
func (w waiter) publishTable(ctx context.Context) error {
	st, size := w.st, w.size
	// The count, read between waits, also ends the wait: the last rank
	// may die between counting itself and saying all have joined.
	if err := w.waitOr(ctx, allJoinedKey, func() bool {
		n, err := st.Add(ctx, joinedKey, 0)
		return err == nil && n >= int64(size)
	}); err != nil {
		return err
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	var b strings.Builder
	fmt.Fprintf(&b, "%x\n", id)
	for r := range size {
		v, err := st.Get(ctx, addrKey(r))
		if err != nil {
			return err
		}
		b.Write(v)
		b.WriteByte('\n')
	}
	return st.Set(ctx, tableKey, []byte(b.String()))
}

// parseTable reads rank 0's table, checking it has every rank.
func parseTable(table []byte, size int) (Meeting, error) {
	lines := strings.Split(strings.TrimSuffix(string(table), "\n"), "\n")
	if len(lines) != size+1 {
		return Meeting{}, fmt.Errorf("ddp: the rendezvous table has %d ranks for WORLD_SIZE=%d", len(lines)-1, size)
	}
	m := Meeting{Addrs: make([]string, size), Hosts: make([]string, size)}
	var err error
	if m.GroupID, err = hex.DecodeString(lines[0]); err != nil {
		return Meeting{}, fmt.Errorf("ddp: the rendezvous table's group id: %w", err)
	}
	for r, line := range lines[1:] {
		m.Addrs[r], m.Hosts[r], _ = strings.Cut(line, " ")
	}
	return m, nil
}

// wait waits for key, checking between short waits whether another rank
// found that the rendezvous cannot succeed; when ctx ends first, it names
// the ranks that never joined.
func (w waiter) wait(ctx context.Context, key string) error {
	return w.waitOr(ctx, key, func() bool { return false })
}

// waitOr is wait that also ends, between its short waits, when done says so.
func (w waiter) waitOr(ctx context.Context, key string, done func() bool) error {
	st, rank := w.st, w.rank
	for {
		slice, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := st.Wait(slice, key)
		cancel()
		var te *store.TimeoutError
		switch {
		case err == nil:
			return nil
		case errors.Is(ctx.Err(), context.Canceled):
			return fmt.Errorf("ddp: rank %d: rendezvous cancelled while waiting for the other ranks: %w", rank, context.Cause(ctx))
		case ctx.Err() != nil:
			return w.missingRanks(context.WithoutCancel(ctx), err)
		case !errors.As(err, &te):
			return fmt.Errorf("ddp: rank %d waiting for the other ranks: %w", rank, err)
		}
		if done() {
			return nil
		}
		found, err := st.Check(ctx, rendezvousFailedKey)
		if err != nil {
			return err
		}
		if found[0] {
			why, err := st.Get(ctx, rendezvousFailedKey)
			if err != nil {
				return err
			}
			return fmt.Errorf("ddp: rank %d: the rendezvous failed: %s", rank, quote.Text(why))
		}
	}
}

// missingRanks is the timeout's error, naming the ranks that never
// published their address (one call: this happens once, on failure).
func (w waiter) missingRanks(ctx context.Context, cause error) error {
	st, rank, size := w.st, w.rank, w.size
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	keys := make([]string, size)
	for r := range keys {
		keys[r] = addrKey(r)
	}
	found, err := st.Check(ctx, keys...)
	if err != nil {
		return fmt.Errorf("ddp: rank %d waiting for the other ranks: %w", rank, cause)
	}
	var missing []int
	for r, ok := range found {
		if !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("ddp: rank %d: every rank joined, but rank 0 never published their addresses (did rank 0 exit?): %w", rank, cause)
	}
	return fmt.Errorf("ddp: rank %d: ranks %v never joined within %v (is WORLD_SIZE=%d right, and did they start?): %w",
		rank, missing, w.within, size, cause)
}
