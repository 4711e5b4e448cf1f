package xla

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each key holds its own value, made once per replica group and shared
// by its replicas; a later RunReplicas starts afresh.
func TestReplicaValue(t *testing.T) {
	e := newEngine(t, 2)
	counterKey, otherKey := new(ReplicaKey[*atomic.Int32]), new(ReplicaKey[*atomic.Int32])
	made := 0
	create := func() *atomic.Int32 { made++; return new(atomic.Int32) }

	d := e.Device(0)
	a, b := ReplicaValue(d, counterKey, create), ReplicaValue(d, counterKey, create)
	assert.Same(t, a, b)
	assert.NotSame(t, a, ReplicaValue(d, otherKey, create), "two keys of one type are two values")
	assert.Equal(t, 2, made)

	for round := range 2 {
		var seen [2]*atomic.Int32
		require.NoError(t, e.RunReplicas(testContext(t), 2, func(_ context.Context, r Replica) error {
			v := ReplicaValue(r.Device(), counterKey, func() *atomic.Int32 { return new(atomic.Int32) })
			v.Add(1)
			seen[r.Index()] = v
			return nil
		}), "round %d", round)
		assert.Same(t, seen[0], seen[1], "the replicas of one group share it")
		assert.EqualValues(t, 2, seen[0].Load(), "a new RunReplicas starts from a new value")
		assert.NotSame(t, a, seen[0])
	}
}
