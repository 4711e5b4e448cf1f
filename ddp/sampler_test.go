package ddp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestDistributedSamplerMatchesTorch: every rank's indices equal torch
// 1.13's DistributedSampler's for a grid of dataset sizes (0 to 60000),
// replica counts, seeds (one above 2^32), epochs, shuffle and drop_last
// (testdata/sampler_fixture.py wrote the fixture with Debian's
// python3-torch).
func TestDistributedSamplerMatchesTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/distributed_sampler_torch.json")
	require.NoError(t, err)
	var fixture struct {
		Torch string
		Cases []struct {
			N, Replicas int
			Seed        uint64
			Epoch       int
			Shuffle     bool
			DropLast    bool `json:"drop_last"`
			Ranks       []struct {
				Len     int
				SHA256  string
				Indices []int
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &fixture))
	require.NotEmpty(t, fixture.Cases)
	for _, c := range fixture.Cases {
		name := fmt.Sprintf("n%d/R%d/seed%d/epoch%d/shuffle%v/drop%v", c.N, c.Replicas, c.Seed, c.Epoch, c.Shuffle, c.DropLast)
		for rank, want := range c.Ranks {
			opts := []ddp.SamplerOption{ddp.SamplerReplicas(c.Replicas, rank), ddp.SamplerSeed(c.Seed)}
			if !c.Shuffle {
				opts = append(opts, ddp.NoShuffle())
			}
			if c.DropLast {
				opts = append(opts, ddp.DropLast())
			}
			s, err := ddp.NewDistributedSampler(c.N, opts...)
			require.NoError(t, err, name)
			got := s.Indices(c.Epoch)
			assert.Equal(t, want.Len, s.Len(), "%s rank %d: Len", name, rank)
			if want.Indices != nil {
				assert.Equal(t, want.Indices, got, "%s rank %d", name, rank)
			}
			text := make([]string, len(got))
			for i, v := range got {
				text[i] = strconv.Itoa(v)
			}
			sum := sha256.Sum256([]byte(strings.Join(text, ",")))
			assert.Equal(t, want.SHA256, hex.EncodeToString(sum[:]), "%s rank %d", name, rank)
		}
	}
}

// TestDistributedSamplerProperties: with DropLast every index appears
// exactly once per epoch across ranks (none when the dataset is smaller
// than the replica count); without it, each index at least once and the
// padding repeats the head; ranks agree on the order; epochs differ.
func TestDistributedSamplerProperties(t *testing.T) {
	for _, n := range []int{0, 1, 3, 5, 17, 100, 1001} {
		for _, replicas := range []int{1, 2, 3, 4, 7} {
			for _, drop := range []bool{false, true} {
				name := fmt.Sprintf("n%d/R%d/drop%v", n, replicas, drop)
				var all [][]int
				for rank := range replicas {
					opts := []ddp.SamplerOption{ddp.SamplerReplicas(replicas, rank), ddp.SamplerSeed(9)}
					if drop {
						opts = append(opts, ddp.DropLast())
					}
					s, err := ddp.NewDistributedSampler(n, opts...)
					require.NoError(t, err)
					idx := s.Indices(2)
					assert.Len(t, idx, s.Len(), name)
					all = append(all, idx)
				}
				// Interleave back into the epoch's global order.
				var order []int
				for i := range len(all[0]) {
					for r := range replicas {
						order = append(order, all[r][i])
					}
				}
				counts := map[int]int{}
				for _, v := range order {
					require.True(t, v >= 0 && v < n, "%s: index %d out of range", name, v)
					counts[v]++
				}
				if drop {
					assert.Equal(t, n/replicas*replicas, len(order), name)
					for v, c := range counts {
						assert.Equal(t, 1, c, "%s: index %d visited %d times", name, v, c)
					}
					continue
				}
				assert.Len(t, counts, n, "%s: every index visited", name)
				if n > 0 {
					full, _ := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(1, 0), ddp.SamplerSeed(9))
					perm := full.Indices(2)
					for i := n; i < len(order); i++ {
						assert.Equal(t, perm[(i-n)%n], order[i], "%s: padding position %d repeats the head", name, i)
					}
				}
			}
		}
	}
	a, _ := ddp.NewDistributedSampler(100, ddp.SamplerReplicas(2, 0))
	assert.False(t, slices.Equal(a.Indices(0), a.Indices(1)), "epochs 0 and 1 give the same order")
}

// TestDistributedSamplerResumesAnywhere: after k steps of b samples per
// replica on W replicas (position k·b·W of the epoch's global order), a
// sampler resumed there on the same W gives each replica exactly the rest
// of its uninterrupted list; on another W′ the samples used before and
// after the resume are each used once (with DropLast; without it every
// sample is still visited, the padding repeating the epoch's head).
func TestDistributedSamplerResumesAnywhere(t *testing.T) {
	indices := func(n, replicas, rank int, drop bool, resumeAt int) []int {
		opts := []ddp.SamplerOption{ddp.SamplerReplicas(replicas, rank), ddp.SamplerSeed(5)}
		if drop {
			opts = append(opts, ddp.DropLast())
		}
		s, err := ddp.NewDistributedSampler(n, opts...)
		require.NoError(t, err)
		require.NoError(t, s.ResumeAt(3, resumeAt))
		return s.Indices(3)
	}
	for _, n := range []int{0, 7, 100, 1001} {
		for _, w := range []int{1, 2, 4} {
			for _, w2 := range []int{1, 2, 3, 4} {
				for _, drop := range []bool{false, true} {
					b := 3
					steps := len(indices(n, w, 0, drop, 0)) / b
					for _, k := range []int{0, min(1, steps), steps / 2, steps} {
						name := fmt.Sprintf("n%d/W%d→%d/drop%v/after %d steps", n, w, w2, drop, k)
						pos := k * b * w
						var used []int
						for r := range w {
							whole := indices(n, w, r, drop, 0)
							used = append(used, whole[:k*b]...)
							if w2 == w {
								assert.Equal(t, whole[k*b:], indices(n, w2, r, drop, pos), "%s: rank %d", name, r)
							}
						}
						counts := map[int]int{}
						for _, v := range used {
							counts[v]++
						}
						for r := range w2 {
							for _, v := range indices(n, w2, r, drop, pos) {
								counts[v]++
							}
						}
						if drop {
							for v, c := range counts {
								assert.Equal(t, 1, c, "%s: sample %d used %d times", name, v, c)
							}
							if pos <= n {
								assert.Len(t, counts, pos+(n-pos)/w2*w2, "%s", name)
							}
						} else {
							assert.Len(t, counts, n, "%s: every sample visited", name)
						}
					}
				}
			}
		}
	}
	s, err := ddp.NewDistributedSampler(10, ddp.SamplerReplicas(2, 0))
	require.NoError(t, err)
	assert.ErrorContains(t, s.ResumeAt(0, -1), "negative")
	require.NoError(t, s.ResumeAt(1, 4))
	assert.Len(t, s.Indices(0), 5, "another epoch is whole")
	assert.Len(t, s.Indices(1), 3, "the resumed epoch holds the rest")
}

// TestDistributedSamplerRefusesBadArguments.
func TestDistributedSamplerRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		n, replicas, rank int
		want              string
	}{
		{-1, 1, 0, "cannot be negative"},
		{10, 0, 0, "want 0 <= replica < count"},
		{10, 2, 2, "want 0 <= replica < count"},
		{10, 2, -1, "want 0 <= replica < count"},
	} {
		_, err := ddp.NewDistributedSampler(c.n, ddp.SamplerReplicas(c.replicas, c.rank))
		assert.ErrorContains(t, err, c.want, "%+v", c)
	}
	s, err := ddp.NewDistributedSampler(10)
	require.NoError(t, err)
	assert.Equal(t, 10, s.Len(), "without a process group: one replica")
	s.SetEpoch(4)
	assert.Equal(t, 4, s.Epoch())
}

// TestDistributedSamplerInsideReplicasNamesItsReplica: in one process
// driving 2 replicas (--spawn), a sampler built without saying which
// replica it serves is refused (counting processes, each replica read the
// whole dataset); Spawn's workers split the dataset as torch's ranks do.
func TestDistributedSamplerInsideReplicasNamesItsReplica(t *testing.T) {
	const n = 10
	t.Setenv("XLADDP_CPU_DEVICES", "")
	indices := make([][]int, 2)
	err := ddp.Spawn(xlatest.Context(t), func(ctx context.Context, w ddp.Worker) error {
		if _, err := ddp.NewDistributedSampler(n); err == nil {
			return fmt.Errorf("replica %d: a sampler without its replica was accepted", w.Rank)
		} else if !strings.Contains(err.Error(), "ddp.SamplerForDevice(w.Device)") {
			return fmt.Errorf("replica %d: %w", w.Rank, err)
		}
		s, err := ddp.NewDistributedSampler(n, ddp.SamplerForDevice(w.Device))
		if err != nil {
			return err
		}
		indices[w.Rank] = s.Indices(0)
		return nil
	}, ddp.SpawnOptions{Devices: 2, Device: backend.Options{Target: backend.CPU, CPUDevices: 2}})
	require.NoError(t, err)
	for r := range 2 {
		want, err := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(2, r))
		require.NoError(t, err)
		assert.Equal(t, want.Indices(0), indices[r], "replica %d", r)
	}
	assert.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, append(indices[0], indices[1]...))
	s, err := ddp.NewDistributedSampler(n)
	require.NoError(t, err, "outside replicas, the process is the replica")
	assert.Equal(t, n, s.Len())
}

// TestDistributedSamplerInLoader: under RunReplicas without a process
// group, SamplerForDevice makes each local replica one of the job's
// replicas, and the data.Loader yields exactly its share of a dataset.
func TestDistributedSamplerInLoader(t *testing.T) {
	const n, replicas, batch = 37, 3, 4
	e := xlatest.NewEngine(t, replicas)
	ds, err := data.NewRandom(n, []int{2}, nil, 5, 1)
	require.NoError(t, err)
	seen := make([][]float32, replicas)
	err = e.RunReplicas(xlatest.Context(t), replicas, func(ctx context.Context, r xla.Replica) error {
		s, err := ddp.NewDistributedSampler(n, ddp.SamplerForDevice(r.Device()), ddp.DropLast())
		if err != nil {
			return err
		}
		want, err := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(replicas, r.Index()), ddp.DropLast())
		if err != nil {
			return err
		}
		if !slices.Equal(want.Indices(1), s.Indices(1)) {
			return fmt.Errorf("replica %d: SamplerForDevice differs from SamplerReplicas(%d, %d)", r.Index(), replicas, r.Index())
		}
		l, err := data.NewLoader(ds, r.Device(), data.LoaderConfig{BatchSize: batch, Sampler: s})
		if err != nil {
			return err
		}
		for b, err := range l.Epoch(ctx, 1) {
			if err != nil {
				return err
			}
			v, err := b.Input.Float32s(ctx)
			if err != nil {
				return err
			}
			seen[r.Index()] = append(seen[r.Index()], v...)
		}
		return nil
	})
	require.NoError(t, err)
	for r := range replicas {
		s, _ := ddp.NewDistributedSampler(n, ddp.SamplerReplicas(replicas, r), ddp.DropLast())
		var want []float32
		for _, i := range s.Indices(1) {
			sample, err := ds.Get(i)
			require.NoError(t, err)
			want = append(want, sample.Input...)
		}
		assert.Equal(t, want, seen[r], "replica %d", r)
		assert.Len(t, seen[r], 2*(n/replicas))
	}
}
