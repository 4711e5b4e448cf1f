package flight_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/internal/knobs"
)

// issueFromHere issues op and returns the file:line of the call.
func issueFromHere(r *flight.Recorder, op flight.Op) (flight.ID, string) {
	_, file, line, _ := runtime.Caller(0)
	id := r.Issue(op, 0)
	return id, fmt.Sprintf("%s:%d", file, line+1)
}

// TestRecordsProgressAndCaller: each entry keeps its operation, its
// state and times, and the file:line of the first frame outside the
// library or in a test file (here this file).
func TestRecordsProgressAndCaller(t *testing.T) {
	r := flight.New(8)
	a, lineA := issueFromHere(r, flight.Op{Seq: 1, Name: "AllReduce", DType: "float32", Count: 10, Peer: -1})
	b, lineB := issueFromHere(r, flight.Op{Seq: 2, Name: "Broadcast", DType: "int64", Count: 3, Peer: 0})
	c, lineC := issueFromHere(r, flight.Op{Seq: 1, P2P: true, Name: "Send", DType: "float32", Count: 1, Peer: 1})
	r.Start(a)
	r.End(a, nil)
	r.Start(b)
	r.End(c, errors.New("peer gone"))
	got := r.Snapshot()
	require.Len(t, got, 3)
	assert.Equal(t, []flight.State{flight.Done, flight.Started, flight.Failed}, []flight.State{got[0].State, got[1].State, got[2].State})
	assert.Equal(t, flight.Op{Seq: 1, Name: "AllReduce", DType: "float32", Count: 10, Peer: -1}, got[0].Op)
	assert.False(t, got[0].Ended.Before(got[0].Started) || got[0].Started.Before(got[0].Issued))
	assert.True(t, got[1].Ended.IsZero(), "a running operation has no end")
	assert.False(t, got[2].Started.IsZero(), "a failure before Start still dates it")
	assert.Equal(t, []string{lineA, lineB, lineC}, []string{got[0].Caller, got[1].Caller, got[2].Caller})
}

func TestRingKeepsTheLastOperations(t *testing.T) {
	r := flight.New(4)
	var ids []flight.ID
	for i := range 10 {
		ids = append(ids, r.Issue(flight.Op{Seq: uint64(i + 1), Name: "AllReduce"}, 0))
	}
	r.End(ids[0], nil) // overwritten long ago: ignored
	r.End(ids[9], nil)
	got := r.Snapshot()
	require.Len(t, got, 4)
	for i, e := range got {
		assert.EqualValues(t, 7+i, e.Seq)
	}
	assert.Equal(t, flight.Done, got[3].State)
	assert.Equal(t, flight.Issued, got[0].State, "the slot ids[0] had is another operation's now")
}

func TestConcurrentRecording(t *testing.T) {
	r := flight.New(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				id := r.Issue(flight.Op{Seq: uint64(g*1000 + i), Name: "AllReduce"}, 0)
				r.Start(id)
				r.End(id, nil)
			}
		}()
	}
	for range 100 {
		_ = r.Snapshot()
	}
	wg.Wait()
	got := r.Snapshot()
	require.Len(t, got, 64)
	for _, e := range got {
		assert.Equal(t, flight.Done, e.State)
	}
}

func TestIssueDoesNotAllocate(t *testing.T) {
	r := flight.New(16)
	op := flight.Op{Seq: 1, Name: "AllReduce", DType: "float32", Count: 1 << 20, Peer: -1}
	allocs := testing.AllocsPerRun(1000, func() {
		id := r.Issue(op, 0)
		r.Start(id)
		r.End(id, nil)
	})
	assert.Zero(t, allocs)
}

func TestEmptyAndTinyRecorders(t *testing.T) {
	assert.Empty(t, flight.New(8).Snapshot())
	r := flight.New(1)
	r.End(r.Issue(flight.Op{Seq: 1, Name: "Barrier"}, 0), nil)
	r.End(flight.ID(0), nil)
	r.Start(flight.ID(99))
	got := r.Snapshot()
	require.Len(t, got, 1)
	assert.Equal(t, flight.Done, got[0].State)

	off := flight.New(0) // $XLADDP_FLIGHT_SIZE=0: records nothing
	id := off.Issue(flight.Op{Seq: 1, Name: "Barrier"}, 0)
	off.Start(id)
	off.End(id, errors.New("x"))
	assert.Empty(t, off.Snapshot())
	assert.Zero(t, testing.AllocsPerRun(100, func() { off.End(off.Issue(flight.Op{Name: "AllReduce"}, 0), nil) }))
}

func BenchmarkIssueStartEnd(b *testing.B) {
	r := flight.New(flight.DefaultSize)
	op := flight.Op{Name: "AllReduce", DType: "float32", Count: 1 << 20, Peer: -1}
	for b.Loop() {
		id := r.Issue(op, 0)
		r.Start(id)
		r.End(id, nil)
	}
}

// TestDefaultSizeIsTheKnobs: the doctor checks $XLADDP_FLIGHT_SIZE
// against the recorder's own default.
func TestDefaultSizeIsTheKnobs(t *testing.T) {
	assert.Equal(t, knobs.DefaultFlightSize, flight.DefaultSize)
}
