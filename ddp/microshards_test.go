package ddp

import (
	"fmt"
	"github.com/xladdp/xladdp/ddp/internal/canonical"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMicroShardsRefuseWhatDoesNotDivide(t *testing.T) {
	for _, c := range []struct{ batch, size int }{{64, 0}, {0, 16}, {-64, 16}, {64, 10}, {64, 128}} {
		_, err := NewMicroShards(c.batch, c.size)
		assert.Error(t, err, "batch %d size %d", c.batch, c.size)
	}
	s, err := NewMicroShards(64, 16)
	require.NoError(t, err)
	assert.Equal(t, 4, s.Count)
	require.NoError(t, s.CheckReplicas(4))
	assert.ErrorContains(t, s.CheckReplicas(5), "5 replicas for 4 micro-shards")
}

func TestRangesCoverTheBatchOnce(t *testing.T) {
	for count := 1; count <= 17; count++ {
		s := MicroShards{GlobalBatch: count, Size: 1, Count: count}
		for w := 1; w <= count; w++ {
			next := 0
			for r := range w {
				first, end := s.Range(r, w)
				require.Equal(t, next, first, "count %d world %d replica %d", count, w, r)
				require.LessOrEqual(t, end-first, (count+w-1)/w)
				require.GreaterOrEqual(t, end-first, count/w)
				next = end
			}
			require.Equal(t, count, next)
		}
	}
}

// symbolic sums: the expression a fold forms, so two folds that add the
// same terms in another order or grouping differ.
func symbolicLeaf(k int) string { return fmt.Sprint("g", k) }
func symbolicAdd(a, b string) string {
	return "(" + a + "+" + b + ")"
}

// TestEveryLayoutSumsInOneOrder: whatever the processes and local
// replicas, the nodes the processes send, folded on the host, form the
// expression one replica forms alone, and each replica's own sums are
// the canonical tree's.
func TestEveryLayoutSumsInOneOrder(t *testing.T) {
	for count := 1; count <= 16; count++ {
		s := MicroShards{GlobalBatch: count, Size: 1, Count: count}
		alone := canonical.SumOver(canonical.Node{Lo: 0, Hi: count}, symbolicLeaf, symbolicAdd)
		for w := 1; w <= count; w++ {
			for local := 1; local <= w; local++ {
				if w%local != 0 {
					continue
				}
				layout := canonical.Layout{Shards: s, Replicas: w, Local: local}
				name := fmt.Sprintf("count %d, %d processes × %d local", count, w/local, local)
				values := map[canonical.Node]string{}
				var sent []canonical.Node
				for q := range w / local {
					sent = append(sent, layout.ProcessNodes(q)...)
				}
				for r := range w {
					p := layout.PlanOf(r)
					first, end := s.Range(r, w)
					real := 0
					for j, sl := range p.Slots {
						if sl.Padding {
							assert.Equal(t, first, sl.Index, name)
							continue
						}
						assert.Equal(t, first+j, sl.Index, name)
						real++
					}
					assert.Equal(t, end-first, real, name)
					for _, n := range p.Items {
						values[n] = canonical.SumOver(n, symbolicLeaf, symbolicAdd)
					}
				}
				got := canonical.Fold(count, func(n canonical.Node) (string, bool) {
					for _, m := range sent {
						if m == n {
							return values[n], true
						}
					}
					return "", false
				}, symbolicAdd)
				require.Equal(t, alone, got, name)
			}
		}
	}
}

// TestLocalReplicasRunOneProgram: within a process every local replica
// has as many slots and items of the same sizes, or the engine could not
// run them as one program.
func TestLocalReplicasRunOneProgram(t *testing.T) {
	for count := 1; count <= 16; count++ {
		s := MicroShards{GlobalBatch: count, Size: 1, Count: count}
		for w := 1; w <= count; w++ {
			for local := 1; local <= w; local++ {
				if w%local != 0 {
					continue
				}
				layout := canonical.Layout{Shards: s, Replicas: w, Local: local}
				for q := range w / local {
					var shapes []string
					for r := q * local; r < (q+1)*local; r++ {
						p := layout.PlanOf(r)
						var b strings.Builder
						fmt.Fprint(&b, len(p.Slots), p.Leaves)
						for _, n := range p.Items {
							fmt.Fprint(&b, " ", n.Hi-n.Lo)
						}
						shapes = append(shapes, b.String())
					}
					for _, sh := range shapes {
						assert.Equal(t, shapes[0], sh, "count %d world %d local %d process %d", count, w, local, q)
					}
				}
			}
		}
	}
}

func TestRandomKeysDifferPerStepAndShard(t *testing.T) {
	seen := map[int64]string{}
	for step := range 50 {
		for shard := range 16 {
			k := randomKey(1, step, shard)
			where := fmt.Sprint(step, shard)
			require.NotContains(t, seen, k, "step,shard %s and %s", where, seen[k])
			seen[k] = where
		}
	}
	assert.NotEqual(t, randomKey(1, 0, 0), randomKey(2, 0, 0))
}
