package dist

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/store"
)

// TestCollectivesAcrossProcesses runs every collective in 1, 2, 3 and 4
// real processes over loopback, each rank checking against references; all
// ranks must also get bitwise-identical all-reduce results.
// It runs twice: with the same-host shared-memory path, and with it off
// (XLADDP_SHM_MIB=0), which exercises the TCP ring multi-node jobs use.
func TestCollectivesAcrossProcesses(t *testing.T) {
	for _, tc := range []struct {
		transport string
		worlds    []int
	}{{"shared memory", []int{1, 2, 3, 4}}, {"tcp ring", []int{2, 3, 4}}} {
		for _, world := range tc.worlds {
			t.Run(fmt.Sprintf("%s world %d", tc.transport, world), func(t *testing.T) {
				shm := "XLADDP_SHM_MIB=16"
				if tc.transport == "tcp ring" {
					shm = "XLADDP_SHM_MIB=0"
				}
				testCollectives(t, world, shm)
			})
		}
	}
}

func testCollectives(t *testing.T, world int, env string) {
	{
		{
			cmds, outs := launch(t, "collectives", world, "XLADDP_TEST_TIMEOUT=60s", env)
			reps := waitReports(t, cmds, outs)
			for _, rep := range reps {
				assert.Empty(t, rep.Error, "rank %d", rep.Rank)
				assert.Empty(t, rep.Failures, "rank %d", rep.Rank)
				// The transport under test must be the one used: no
				// silent fallback from shared memory to TCP.
				switch {
				case world == 1:
				case strings.Contains(env, "SHM_MIB=0"):
					assert.Equal(t, "tcp", rep.Transport, "rank %d", rep.Rank)
					assert.Zero(t, rep.SharedMemoryAllReduces, "rank %d", rep.Rank)
				default:
					assert.Equal(t, "shared memory", rep.Transport, "rank %d", rep.Rank)
					assert.Positive(t, rep.SharedMemoryAllReduces, "rank %d: all-reduces through shared memory", rep.Rank)
				}
			}
			require.NotEmpty(t, reps[0].Hashes)
			t.Logf("world %d (%s): %d all-reduce cases checked on each rank", world, env, len(reps[0].Hashes))
			for _, rep := range reps[1:] {
				assert.Equal(t, reps[0].Hashes, rep.Hashes, "rank %d's results differ from rank 0's", rep.Rank)
			}
		}
	}
}

// TestKilledRankIsNamed SIGKILLs rank 1 of 3 during all-reduces: ranks 0
// and 2 must return an error naming rank 1 within the 2 s timeout.
func TestKilledRankIsNamed(t *testing.T) {
	cmds, outs := launch(t, "kill", 3, "XLADDP_TEST_TIMEOUT=2s")
	deadline := time.Now().Add(20 * time.Second)
	for r := range cmds {
		for !strings.Contains(outs[r].String(), "looping") {
			require.True(t, time.Now().Before(deadline), "rank %d never started looping", r)
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	require.NoError(t, cmds[1].Process.Signal(syscall.SIGKILL))
	reps := waitReports(t, cmds, outs)
	elapsed := time.Since(killed)
	for _, r := range []int{0, 2} {
		assert.Contains(t, reps[r].Error, ": rank 1: ", "rank %d attributes the failure to the dead rank", r)
		assert.Less(t, reps[r].Elapsed, 2.5, "rank %d failed within the timeout", r)
	}
	assert.Less(t, elapsed, 10*time.Second)
	t.Logf("rank 0: %s\nrank 2: %s", reps[0].Error, reps[2].Error)
}

// TestStalledRankTimesOut: rank 1 of 3 is alive but never joins; the
// others fail once the 3 s timeout passes, not before, naming the rank
// they waited for. (At 1 s a loaded machine's rendezvous itself timed
// out: the timeout bounds it too.)
func TestStalledRankTimesOut(t *testing.T) {
	cmds, outs := launch(t, "stall", 3, "XLADDP_TEST_TIMEOUT=3s")
	reps := waitReports(t, cmds, outs)
	for _, r := range []int{0, 2} {
		assert.Contains(t, reps[r].Error, "rank 1: timed out", "rank %d", r)
		assert.GreaterOrEqual(t, reps[r].Elapsed, 2.99, "rank %d failed at the timeout, not before", r)
		assert.Less(t, reps[r].Elapsed, stallFor.Seconds(), "rank %d failed before rank 1 came back", r)
	}
}

// TestMismatchInDebugMode: rank 0 calls AllReduce while rank 1 calls
// Broadcast; both fail with both ranks' fingerprints.
func TestMismatchInDebugMode(t *testing.T) {
	cmds, outs := launch(t, "mismatch", 2, "XLADDP_TEST_TIMEOUT=10s", EnvDistributedDebug+"=1")
	reps := waitReports(t, cmds, outs)
	for _, rep := range reps {
		assert.Contains(t, rep.Error, "ranks called different collectives at collective #1")
		assert.Contains(t, rep.Error, "rank 0: #1 AllReduce(SUM, float32[10])")
		assert.Contains(t, rep.Error, "rank 1: #1 Broadcast(root 0, float32[10])")
	}
}

func TestFileInitMethod(t *testing.T) {
	path := filepath.Join(t.TempDir(), "init")
	cmds, outs := launch(t, "basic", 3, "XLADDP_TEST_TIMEOUT=20s", "XLADDP_TEST_INIT_METHOD=file://"+path)
	for _, rep := range waitReports(t, cmds, outs) {
		assert.Empty(t, rep.Error)
		assert.Equal(t, "6", rep.Hashes["sum"])
		assert.Equal(t, fmt.Sprintf("%d/3", rep.Rank), rep.Hashes["local"], "local rank from the shared host name")
	}
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err), "the last rank removes the init file")
}

func TestRendezvousErrors(t *testing.T) {
	t.Run("a world that never fills", func(t *testing.T) {
		port := freePort(t)
		cmds, outs := launch(t, "basic", 2, "XLADDP_TEST_TIMEOUT=1s", EnvWorldSize+"=3", fmt.Sprintf("%s=%d", EnvMasterPort, port))
		for _, rep := range waitReports(t, cmds, outs) {
			assert.Contains(t, rep.Error, "ranks [2] never joined within 1s (is WORLD_SIZE=3 right")
		}
	})
	t.Run("duplicate rank", func(t *testing.T) {
		// Ranks 0 and 1 of a world of 3 wait for rank 2, which never comes;
		// a second rank 1 arrives instead. Everyone fails at once, told why.
		port := freePort(t)
		env := []string{"XLADDP_TEST_TIMEOUT=20s", fmt.Sprintf("%s=%d", EnvMasterPort, port), EnvWorldSize + "=3"}
		cmds, outs := launch(t, "basic", 2, env...)
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		dup, dupOut := launch(t, "basic", 1, append(env, EnvRank+"=1")...)
		reps := append(waitReports(t, dup, dupOut), waitReports(t, cmds, outs)...)
		assert.Less(t, time.Since(start), 10*time.Second, "no one waits out the 20 s timeout")
		for i, rep := range reps {
			assert.Contains(t, rep.Error, "rank 1 is claimed twice", "process %d", i)
		}
	})
	t.Run("two processes with RANK=0", func(t *testing.T) {
		// The second cannot host the store (the port is taken): both must
		// say rank 0 is claimed twice, promptly, not time out.
		port := freePort(t)
		env := []string{"XLADDP_TEST_TIMEOUT=20s", fmt.Sprintf("%s=%d", EnvMasterPort, port), EnvWorldSize + "=2"}
		first, firstOut := launch(t, "basic", 1, env...)
		time.Sleep(300 * time.Millisecond) // the first hosts the store
		start := time.Now()
		second, secondOut := launch(t, "basic", 1, env...)
		reps := append(waitReports(t, second, secondOut), waitReports(t, first, firstOut)...)
		assert.Less(t, time.Since(start), 10*time.Second, "no one waits out the 20 s timeout")
		for i, rep := range reps {
			assert.Contains(t, rep.Error, "rank 0 is claimed twice", "process %d", i)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		port := freePort(t)
		r0, out0 := launch(t, "basic", 1, "XLADDP_TEST_TIMEOUT=2s", EnvWorldSize+"=2", fmt.Sprintf("%s=%d", EnvMasterPort, port), "XLADDP_STORE_TOKEN=right")
		r1, out1 := launch(t, "basic", 1, "XLADDP_TEST_TIMEOUT=2s", EnvWorldSize+"=2", EnvRank+"=1", fmt.Sprintf("%s=%d", EnvMasterPort, port), "XLADDP_STORE_TOKEN=wrong")
		rep1 := waitReports(t, r1, out1)[0]
		assert.Contains(t, rep1.Error, "authentication failed")
		rep0 := waitReports(t, r0, out0)[0]
		assert.Contains(t, rep0.Error, "ranks [1] never joined")
	})
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{EnvRank + "=3", EnvWorldSize + "=3"}, "RANK=3 but WORLD_SIZE=3: ranks run from 0 to 2"},
		{[]string{EnvRank + "=0", EnvWorldSize + "=x"}, `$WORLD_SIZE="x" is not an integer`},
		{[]string{EnvRank + "=", EnvWorldSize + "=2"}, "RANK is not set: set $RANK"},
		{[]string{EnvRank + "=", EnvWorldSize + "=", "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_SIZE="}, "no launcher started this process"},
		{[]string{EnvRank + "=0", EnvWorldSize + "=1", EnvMasterAddr + "="}, "env:// needs $MASTER_ADDR and $MASTER_PORT"},
		// mpirun across two hosts, without MASTER_ADDR: the two ways out.
		{[]string{EnvRank + "=", EnvWorldSize + "=", EnvMasterAddr + "=", EnvMasterPort + "=", "OMPI_COMM_WORLD_RANK=1",
			"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=1"},
			"under mpirun across hosts, run the process group over MPI (--backend mpi"},
		{[]string{EnvRank + "=0", EnvWorldSize + "=1", EnvMasterAddr + "=127.0.0.1", EnvMasterPort + "=99999"}, `master port "99999" is not a port number`},
		// A bad value used to be ignored silently.
		{[]string{EnvRank + "=0", EnvWorldSize + "=1", EnvShmMiB + "=lots"}, `$XLADDP_SHM_MIB="lots": give a slot size in MiB from 0`},
		{[]string{EnvRank + "=0", EnvWorldSize + "=1", EnvShmMiB + "=-1"}, `$XLADDP_SHM_MIB="-1"`},
		{[]string{EnvRank + "=0", EnvWorldSize + "=1", EnvShmMiB + "=1000000"}, `$XLADDP_SHM_MIB="1000000"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			_, err := InitProcessGroup(t.Context(), NewOptions())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestInitHonoursCancellation: cancelling ctx ends InitProcessGroup at
// once at every stage of the rendezvous, including while rank 0 accepts
// the higher ranks' connections (that loop used to wait for the deadline).
func TestInitHonoursCancellation(t *testing.T) {
	for _, stage := range []string{"waiting for ranks", "accepting connections"} {
		t.Run(stage, func(t *testing.T) {
			port := freePort(t)
			t.Setenv(EnvMasterAddr, "127.0.0.1")
			t.Setenv(EnvMasterPort, fmt.Sprint(port))
			o := NewOptions()
			o.Rank, o.WorldSize, o.Timeout = 0, 2, time.Minute
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				g, err := InitProcessGroup(ctx, o)
				if g != nil {
					g.Destroy()
				}
				done <- err
			}()
			if stage == "accepting connections" {
				// A rank 1 that registers but never connects.
				fake, err := store.Dial(ctx, fmt.Sprintf("127.0.0.1:%d", port), "")
				require.NoError(t, err)
				defer fake.Close()
				_, err = fake.CompareSet(ctx, "rank/1", nil, []byte("fake rank 1"))
				require.NoError(t, err)
				require.NoError(t, fake.Set(ctx, "addr/1", []byte("127.0.0.1:1 "+mustHostname(t))))
				_, err = fake.Add(ctx, "rendezvous/joined", 1) // the meeting's count (ddp/internal/tcp/meet.go)
				require.NoError(t, err)
			}
			time.Sleep(300 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				require.Error(t, err)
				assert.ErrorIs(t, err, context.Canceled)
				if stage == "accepting connections" {
					assert.Contains(t, err.Error(), "waiting for 1 higher ranks to connect")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("InitProcessGroup ignored the cancellation")
			}
		})
	}
}

func mustHostname(t *testing.T) string {
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}
