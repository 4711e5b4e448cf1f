package flight_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// at is a collective entry: number, op, state, caller.
func at(seq uint64, name string, state flight.State, caller string) flight.Entry {
	return flight.Entry{Op: flight.Op{Seq: seq, Name: name, DType: "float32", Count: 10, Peer: -1}, State: state, Caller: caller}
}

func TestDiagnose(t *testing.T) {
	panicked := func(d flight.Dump, p string) flight.Dump { d.Reason = "panic: " + p; return d }
	waiting := func(rank int) flight.Dump {
		return flight.Dump{Rank: rank, Entries: []flight.Entry{
			at(182, "AllReduce", flight.Done, "/src/train.go:57"), at(183, "AllReduce", flight.Started, "/src/train.go:61")}}
	}
	lagging := flight.Dump{Rank: 2, Entries: []flight.Entry{
		at(181, "AllReduce", flight.Done, "/src/train.go:61"), at(182, "AllReduce", flight.Done, "/src/train.go:57"),
		{Op: flight.Op{Seq: 4, P2P: true, Name: "Send", Peer: 0}, State: flight.Started, Caller: "/src/x.go:1"}}}
	mismatched := waiting(1)
	mismatched.Entries[1] = flight.Entry{Op: flight.Op{Seq: 183, Name: "Broadcast", DType: "int64", Count: 3, Peer: 0},
		State: flight.Started, Caller: "/src/eval.go:9"}
	for _, tc := range []struct {
		name  string
		dumps []flight.Dump
		world int
		want  string
	}{
		{"a rank behind", []flight.Dump{waiting(0), waiting(1), lagging, waiting(3)}, 4,
			"rank 2 finished AllReduce #182 but never joined #183; its last call was train.go:57; " +
				"ranks 0,1,3 wait in AllReduce #183 at train.go:61"},
		{"a rank without a dump", []flight.Dump{waiting(0), waiting(1), waiting(2)}, 4,
			"rank 3 left no flight dump (killed, stopped, or never started); ranks 0,1,2 wait in AllReduce #183 at train.go:61"},
		{"different calls under one number", []flight.Dump{waiting(0), mismatched}, 2,
			"collective #183 differs between ranks: rank 0 called AllReduce float32[10] at train.go:61; " +
				"rank 1 called Broadcast int64[3] at eval.go:9; rank 0 waits in AllReduce #183 at train.go:61; " +
				"rank 1 waits in Broadcast #183 at eval.go:9"},
		{"a failure", []flight.Dump{{Rank: 0, Entries: []flight.Entry{at(7, "AllGather", flight.Failed, "a.go:3")}},
			{Rank: 1, Entries: []flight.Entry{at(7, "AllGather", flight.Failed, "a.go:3")}}}, 2,
			"ranks 0,1 failed in AllGather #7 at a.go:3"},
		{"all finished", []flight.Dump{{Rank: 0, Entries: []flight.Entry{at(3, "Barrier", flight.Done, "a.go:3")}},
			{Rank: 1, Entries: []flight.Entry{at(3, "Barrier", flight.Done, "a.go:3")}}}, 2,
			"ranks 0,1 finished Barrier #3 and are in no collective"},
		{"a rank that never issued one", []flight.Dump{waiting(0), {Rank: 1}}, 2,
			"rank 1 never joined collective #1; rank 0 waits in AllReduce #183 at train.go:61"},
		{"a rank that panicked", []flight.Dump{waiting(0), panicked(lagging, "assertion failed: NaN"), waiting(1)}, 3,
			"rank 2 finished AllReduce #182 but never joined #183; its last call was train.go:57 " +
				`(then it panicked: "assertion failed: NaN"); ranks 0,1 wait in AllReduce #183 at train.go:61`},
		{"a huge panic is cut", []flight.Dump{waiting(0), panicked(lagging, strings.Repeat("x", 5000))}, 3,
			"rank 1 left no flight dump (killed, stopped, or never started); rank 2 finished AllReduce #182 but never joined #183; " +
				`its last call was train.go:57 (then it panicked: "` + strings.Repeat("x", 200) + `…"); rank 0 waits in AllReduce #183 at train.go:61`},
		{"an all-to-all's counts differ between ranks", []flight.Dump{
			{Rank: 0, Entries: []flight.Entry{{Op: flight.Op{Seq: 5, Name: "AllToAllSingle", DType: "float32", Count: 12, Peer: -1},
				State: flight.Started, Caller: "canonical.go:9"}}},
			{Rank: 1, Entries: []flight.Entry{{Op: flight.Op{Seq: 5, Name: "AllToAllSingle", DType: "float32", Count: 7, Peer: -1},
				State: flight.Started, Caller: "canonical.go:9"}}}}, 3,
			"rank 2 left no flight dump (killed, stopped, or never started); ranks 0,1 wait in AllToAllSingle #5 at canonical.go:9"},
		{"an all-to-all of another dtype differs", []flight.Dump{
			{Rank: 0, Entries: []flight.Entry{{Op: flight.Op{Seq: 5, Name: "AllToAllSingle", DType: "float32", Count: 12, Peer: -1},
				State: flight.Started, Caller: "a.go:9"}}},
			{Rank: 1, Entries: []flight.Entry{{Op: flight.Op{Seq: 5, Name: "AllToAllSingle", DType: "float64", Count: 12, Peer: -1},
				State: flight.Started, Caller: "a.go:9"}}}}, 2,
			"collective #5 differs between ranks: rank 0 called AllToAllSingle float32 at a.go:9; rank 1 called AllToAllSingle float64 at a.go:9; " +
				"ranks 0,1 wait in AllToAllSingle #5 at a.go:9"},
		{"no dumps", nil, 2, "ranks 0,1 left no flight dump (killed, stopped, or never started)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, flight.Diagnose(tc.dumps, flight.Ranks(tc.world)))
		})
	}
}

func TestDumpsRoundTripAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	d := flight.Dump{Rank: 1, World: 2, Transport: "tcp", Reason: "SIGUSR1",
		Entries: []flight.Entry{at(1, "AllReduce", flight.Done, "a.go:1")}}
	require.NoError(t, flight.Write(dir, d))
	require.NoError(t, flight.Write(dir, flight.Dump{Rank: 0, World: 2}))
	got, err := flight.Read(dir)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, 0, got[0].Rank)
	assert.Equal(t, d.Entries[0].Op, got[1].Entries[0].Op)
	assert.Equal(t, d.Reason, got[1].Reason)
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".flight-*"))
	assert.Empty(t, leftovers, "no temporary file is left")

	for _, bad := range []struct{ name, content, want string }{
		{"flight-rank5.json", `{"rank": 5, "entr`, "is not a flight dump"},
		{"flight-rank6.json", `{"rank": 7}`, "holds rank 7's dump"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, bad.name), []byte(bad.content), 0o644))
			_, err := flight.Read(dir)
			assert.ErrorContains(t, err, bad.want)
		})
	}
	t.Run("too large", func(t *testing.T) {
		dir := t.TempDir()
		f, err := os.Create(filepath.Join(dir, "flight-rank0.json"))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(17<<20))
		require.NoError(t, f.Close())
		_, err = flight.Read(dir)
		assert.ErrorContains(t, err, "more than a dump holds")
	})
	t.Run("unwritable directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		assert.Error(t, flight.Write(filepath.Join(file, "sub"), d))
	})
}

// TestBehind: the ranks that stopped before the others' last collective,
// or issued none.
func TestBehind(t *testing.T) {
	ahead := flight.Dump{Rank: 0, Entries: []flight.Entry{at(4, "AllReduce", flight.Failed, "a.go:1")}}
	lagging := flight.Dump{Rank: 2, Entries: []flight.Entry{at(3, "AllReduce", flight.Done, "a.go:1")}}
	empty := flight.Dump{Rank: 5}
	assert.Equal(t, []int{2, 5}, flight.Behind([]flight.Dump{ahead, lagging, empty}))
	assert.Empty(t, flight.Behind([]flight.Dump{ahead}))
	assert.Empty(t, flight.Behind(nil))
}

// TestLastEnded: the latest end among every rank's entries; zero when
// nothing ended (an entry still running has no end).
func TestLastEnded(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ended := func(seq uint64, end time.Time) flight.Entry {
		e := at(seq, "AllReduce", flight.Done, "main.go:1")
		e.Ended = end
		return e
	}
	running := at(3, "AllReduce", flight.Started, "main.go:1")
	tests := []struct {
		name  string
		dumps []flight.Dump
		want  time.Time
	}{
		{"none", nil, time.Time{}},
		{"nothing ended", []flight.Dump{{Rank: 0, Entries: []flight.Entry{running}}}, time.Time{}},
		{"the latest of every rank", []flight.Dump{
			{Rank: 0, Entries: []flight.Entry{ended(1, t0), ended(2, t0.Add(2*time.Second)), running}},
			{Rank: 1, Entries: []flight.Entry{ended(1, t0.Add(time.Second)), ended(2, t0.Add(3*time.Second))}},
		}, t0.Add(3 * time.Second)},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, flight.LastEnded(tt.dumps), tt.name)
	}
}

// TestBusyDeclared: declared work nests and ends (twice is harmless),
// travels in a dump, and is said per rank with how long it has lasted.
func TestBusyDeclared(t *testing.T) {
	var s flight.BusyState
	assert.Empty(t, s.Now().What)
	endOuter := s.Begin("evaluating")
	endInner := s.Begin("saving")
	assert.Equal(t, "saving", s.Now().What)
	endInner()
	endInner()
	assert.Equal(t, "evaluating", s.Now().What, "the outer work again")
	since := s.Now().Since
	endOuter()
	assert.Empty(t, s.Now().What)
	assert.False(t, s.Now().Ended.Before(since), "the end is recorded, as progress")
	assert.Equal(t, s.Now().Ended, flight.LastBusyEnded([]flight.Dump{{Busy: s.Now()}, {}}))

	dir := t.TempDir()
	require.NoError(t, flight.Write(dir, flight.Dump{Rank: 1, Busy: flight.Busy{What: "evaluating", Since: since}}))
	require.NoError(t, flight.Write(dir, flight.Dump{Rank: 0}))
	dumps, err := flight.Read(dir)
	require.NoError(t, err)
	phrase, any := flight.Declared(dumps, since.Add(70*time.Second))
	assert.True(t, any)
	assert.Equal(t, "rank 1 is evaluating (for 1m10s)", phrase)
	_, any = flight.Declared(dumps[:1], time.Now())
	assert.False(t, any)
}
