package transport

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/reduce"
)

func TestRegistry(t *testing.T) {
	open := func(context.Context, Config) (Opened, error) { return Opened{}, nil }
	Register("registry-test", open)
	f, ok := Lookup("registry-test")
	require.True(t, ok)
	assert.NotNil(t, f)
	_, ok = Lookup("nowhere")
	assert.False(t, ok)
	assert.PanicsWithValue(t, "transport: registry-test registered twice", func() { Register("registry-test", open) })
}

type lease struct{ released bool }

func (l *lease) Released() bool { return l.released }

// A leased buffer is unusable once its lease is released; an unknown
// dtype is refused with the constructors to use.
func TestBufferChecks(t *testing.T) {
	l := &lease{}
	b := LeasedBuffer(Float32, make([]byte, 8), l)
	require.NoError(t, b.Check("AllReduce"))
	assert.Equal(t, 2, b.Len())
	l.released = true
	assert.ErrorIs(t, b.Check("AllReduce"), ErrGroupClosed)
	_, err := Values[float32](b)
	assert.ErrorIs(t, err, ErrGroupClosed)
	assert.ErrorContains(t, Buffer{DType: DType(99)}.Check("Send"), "unsupported dtype")
	_, err = Values[int64](Float32s([]float32{1}))
	assert.ErrorContains(t, err, "Values[int64] of a float32 buffer")
}

// The kernels against a float64 reference: every op on float32 and
// int64, Avg reduced as a sum and divided once (integers truncate).
func TestReduceKernels(t *testing.T) {
	a, b := []float64{1.5, -2, 3}, []float64{4, 0.25, -3}
	for _, tc := range []struct {
		op   reduce.Op
		want func(x, y float64) float64
	}{
		{reduce.Sum, func(x, y float64) float64 { return x + y }},
		{reduce.Avg, func(x, y float64) float64 { return (x + y) / 2 }},
		{reduce.Min, func(x, y float64) float64 { return min(x, y) }},
		{reduce.Max, func(x, y float64) float64 { return max(x, y) }},
		{reduce.Product, func(x, y float64) float64 { return x * y }},
	} {
		dst, src := []float32{1.5, -2, 3}, []float32{4, 0.25, -3}
		ReduceInto(Float32s(dst), Float32s(src), tc.op)
		if tc.op == reduce.Avg {
			FinishAvg(Float32s(dst), 2)
		}
		for i := range dst {
			assert.InDelta(t, tc.want(a[i], b[i]), float64(dst[i]), 1e-6, "%s [%d]", tc.op, i)
		}
	}
	ints := []int64{7, -7}
	ReduceInto(Int64s(ints), Int64s([]int64{0, 0}), reduce.Avg)
	FinishAvg(Int64s(ints), 2)
	assert.Equal(t, []int64{3, -3}, ints, "integers divide truncating toward zero")
}

func TestCallDescribe(t *testing.T) {
	buf := Float32s(make([]float32, 3))
	assert.Equal(t, "AllReduce(SUM, float32[3])", Call{Kind: AllReduce, Op: reduce.Sum, Buf: buf}.Describe())
	assert.Equal(t, "Send(rank 1, tag 7, float32[3])", Call{Kind: Send, Root: 1, Tag: 7, Buf: buf}.Describe())
	assert.Equal(t, "Barrier", Call{Kind: Barrier}.Describe())
	assert.Equal(t, "AllToAllSingle", AllToAll.String())
	assert.Equal(t, "Kind(99)", Kind(99).String())
}

func TestFingerprints(t *testing.T) {
	mine := Fingerprint(3, "AllReduce(SUM, float32[3])")
	assert.Len(t, mine, FingerprintSize)
	require.NoError(t, CompareFingerprints(3, [][]byte{mine, mine}, mine))
	other := Fingerprint(3, "Broadcast(root 0, float32[3])")
	err := CompareFingerprints(3, [][]byte{mine, other}, mine)
	assert.ErrorIs(t, err, ErrMismatch)
	assert.ErrorContains(t, err, "rank 1: #3 Broadcast(root 0, float32[3])")
}

func TestClosedPeersReadsBackPrintedPeerErrors(t *testing.T) {
	closed := func(rank int) string {
		return (&PeerError{Rank: rank, Op: "AllReduce #128", Err: ErrPeerClosed}).Error()
	}
	wrapped := (&PeerError{Rank: 3, Op: "Broadcast #2", Err: fmt.Errorf("%w: read: connection reset by peer", ErrPeerClosed)}).Error()
	for _, tc := range []struct {
		name, output string
		want         []int
	}{
		{"empty", "", nil},
		{"one", "[rank1]:preemptible: xla: Backward: " + closed(0) + "\n", []int{0}},
		{"wrapped socket error", wrapped, []int{3}},
		{"two lines", closed(12) + "\n" + closed(7), []int{12, 7}},
		{"a timeout blames nobody", (&PeerError{Rank: 2, Op: "AllReduce #1", Err: ErrTimeout}).Error(), nil},
		{"the words without a rank", ErrPeerClosed.Error(), nil},
		{"a rank too large to read", "rank 99999999999999999999: " + ErrPeerClosed.Error(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ClosedPeers(tc.output))
		})
	}
}
