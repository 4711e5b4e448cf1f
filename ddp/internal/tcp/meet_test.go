package tcp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

func meetingStore(t *testing.T) string {
	t.Helper()
	srv, err := store.Listen("127.0.0.1:0", "")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv.Addr()
}

// meetAll runs Meet for ranks (of size), each over its own connection,
// and returns each rank's meeting and error.
func meetAll(t *testing.T, addr string, ranks []int, size int, within time.Duration) ([]Meeting, []error) {
	t.Helper()
	ms, errs := make([]Meeting, len(ranks)), make([]error, len(ranks))
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			c, err := store.Dial(t.Context(), addr, "")
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			ms[i], errs[i] = Meet(ctx, c, r, size, fmt.Sprintf("10.0.0.%d:%d host%d", r%250, 1000+r, r/32), fmt.Sprintf("proc %d", r), within)
		})
	}
	wg.Wait()
	return ms, errs
}

// TestMeetGivesEveryRankTheSameTable: 512 ranks meet, each with a
// constant number of calls but rank 0's reads, and each gets every
// rank's address and host and one group id.
func TestMeetGivesEveryRankTheSameTable(t *testing.T) {
	const size = 512
	ranks := make([]int, size)
	for i := range ranks {
		ranks[i] = size - 1 - i // the last rank first
	}
	ms, errs := meetAll(t, meetingStore(t), ranks, size, time.Minute)
	for i, err := range errs {
		require.NoError(t, err, "rank %d", ranks[i])
	}
	for _, m := range ms {
		assert.Equal(t, ms[0].GroupID, m.GroupID)
		assert.Equal(t, ms[0].Addrs, m.Addrs)
		assert.Len(t, m.GroupID, 16)
	}
	assert.Equal(t, "10.0.0.7:1007", ms[0].Addrs[7])
	assert.Equal(t, "host15", ms[0].Hosts[511])
}

// TestMeetNamesWhoIsMissing: a rank that never comes is named by every
// other rank when the wait ends; so is a rank 0 that never publishes.
func TestMeetNamesWhoIsMissing(t *testing.T) {
	_, errs := meetAll(t, meetingStore(t), []int{0, 1, 3}, 4, 1500*time.Millisecond)
	for _, err := range errs {
		assert.ErrorContains(t, err, "ranks [2] never joined within 1.5s (is WORLD_SIZE=4 right")
	}
	_, errs = meetAll(t, meetingStore(t), []int{1, 2}, 3, 1500*time.Millisecond)
	for _, err := range errs {
		assert.ErrorContains(t, err, "ranks [0] never joined")
	}
}

// TestMeetRefusesATableThatLies: a table with the wrong rank count is an
// error, never a short or long address list.
func TestMeetRefusesATableThatLies(t *testing.T) {
	_, err := parseTable([]byte("00112233445566778899aabbccddeeff\na:1 h\n"), 2)
	assert.ErrorContains(t, err, "the rendezvous table has 1 ranks for WORLD_SIZE=2")
	_, err = parseTable([]byte("zz\na:1 h\n"), 1)
	assert.ErrorContains(t, err, "group id")
	m, err := parseTable([]byte("0011\na:1 h\n"), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1"}, m.Addrs)
}
