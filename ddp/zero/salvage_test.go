package zero_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
)

func init() { ddptest.Scenarios["zero-salvage"] = zeroSalvageScenario }

const (
	salvagePeriodic = 5 // the periodic checkpoint's step
	salvageAt       = 8 // the step the survivors salvage
	salvageAfter    = 6 // steps compared after it
)

// zeroSalvageScenario trains $XLADDP_TEST_MODEL (toy) with a sharded Adam whose
// buddy copies are on, under a Checkpointer in $XLADDP_TEST_DIR (a
// periodic checkpoint at step salvagePeriodic). Phase "salvage": after
// step salvageAt the ranks in $XLADDP_TEST_SURVIVORS write what they hold
// (Checkpointer.Salvage, as after a lost peer; with $XLADDP_TEST_MIDSTEP
// after the next step's forward and backward, before its update), then
// every rank trains on.
// Phase "resume": Restore (which assembles what was salvaged), then
// train on. Both report the steps after salvageAt: losses (its own),
// the step resumed (Counters["resumed"]) and the resume's log
// (Hashes["log"]).
func zeroSalvageScenario(rep *ddptest.Report) {
	ctx := context.Background()
	devices := max(1, atoi(os.Getenv("XLADDP_TEST_DEVICES")))
	e, done, err := ddptest.JoinJob(ctx, devices)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	rep.Hashes = map[string]string{}
	err = e.RunReplicas(ctx, devices, func(ctx context.Context, r xla.Replica) error {
		replica, replicas := dist.Rank()*devices+r.Index(), dist.WorldSize()*devices
		reporter := r.Index() == 0 // local replica 0 reports
		rows := ddptest.GlobalRows / replicas
		kind := cmp.Or(os.Getenv("XLADDP_TEST_MODEL"), "toy")
		model, z, err := newShardedModel(ctx, r.Device(), kind, "adam", 100)
		if err != nil {
			return err
		}
		ck, err := checkpoint.New(checkpoint.Options{Dir: os.Getenv("XLADDP_TEST_DIR"), Every: salvagePeriodic, Keep: 2})
		if err != nil {
			return err
		}
		defer ck.Close()
		state := optim.Checkpoint{Model: model, Optimizer: z, RNG: r.Device()}
		commit := true // the salvaging run's later steps leave the directory to the resume
		salvage := func() error {
			if slices.Contains(strings.Split(os.Getenv("XLADDP_TEST_SURVIVORS"), ","), strconv.Itoa(dist.Rank())) {
				_, err := ck.Salvage(ctx, state)
				return err
			}
			return nil
		}
		midStep := false // salvage between the forward and the update, as a loss in the exchange does
		victim, lose := strconv.Atoi(os.Getenv("XLADDP_TEST_VICTIM"))
		step := func() (float32, error) {
			z.ZeroGrad()
			loss, err := ddptest.LossOn(r.Device(), model, kind, replica*rows, (replica+1)*rows)
			if err == nil && midStep {
				midStep = false
				if err = loss.Backward(); err == nil {
					err = r.Device().MarkStep(ctx)
				}
				switch {
				case err == nil && lose == nil && dist.Rank() == victim:
					os.Exit(3) // lost before its update
				case err == nil && lose != nil:
					err = salvage()
				}
				if err == nil {
					err = z.Step()
				}
				if lose == nil && dist.PeerLost(err) {
					return 0, errors.Join(errSalvaged, salvage())
				}
				if err == nil {
					err = r.Device().MarkStep(ctx)
				}
			} else if err == nil {
				err = optim.BackwardStep(ctx, loss, z)
			}
			if err != nil {
				return 0, err
			}
			state.Step++
			v, err := loss.Item(ctx)
			if err == nil && commit {
				err = ck.Step(ctx, state)
			}
			return float32(v), err
		}
		if os.Getenv("XLADDP_TEST_PHASE") == "resume" {
			restore := func() error { _, err := ck.Restore(ctx, &state); return err }
			if !reporter {
				err = restore()
			} else { // the one replica that writes the log (local replica 0 does) catches it
				rep.Hashes["log"], err = logOf(restore)
			}
			if err != nil {
				return err
			}
		} else {
			if v, ok := os.LookupEnv("XLADDP_TEST_RANK1_BUDDIES"); ok && dist.Rank() == 1 {
				os.Setenv("XLADDP_ZERO_BUDDIES", v)
			}
			if err := z.KeepBuddyCopies(ctx); err != nil {
				return err
			}
			for state.Step < salvageAt {
				if _, err := step(); err != nil {
					return err
				}
			}
			if midStep = os.Getenv("XLADDP_TEST_MIDSTEP") != ""; !midStep {
				if err := salvage(); err != nil {
					return err
				}
			}
			commit = false
		}
		counters := map[string]int64{"resumed": int64(state.Step)}
		if reporter {
			rep.Counters = counters
		}
		for range salvageAfter {
			loss, err := step()
			if errors.Is(err, errSalvaged) && errors.Unwrap(err) == nil {
				counters["salvaged"] = 1
				return nil
			}
			if err != nil {
				return err
			}
			if reporter {
				rep.Losses = append(rep.Losses, loss)
			}
		}
		tensors, err := nn.EncodeTensors(ctx, nn.StateDict(model))
		if err != nil {
			return err
		}
		sum := sha256.New()
		for _, t := range tensors {
			sum.Write(t.Data)
		}
		if reporter {
			rep.Hashes["model"] = hex.EncodeToString(sum.Sum(nil))
		}
		return nil
	})
	if err != nil {
		rep.Error = err.Error()
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// errSalvaged ends a run whose step lost a peer once it salvaged.
var errSalvaged = errors.New("salvaged after a lost peer")

// logOf runs f and returns what it wrote to stderr.
func logOf(f func() error) (string, error) {
	tmp, err := os.CreateTemp("", "stderr")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	saved := os.Stderr
	os.Stderr = tmp
	err = f()
	os.Stderr = saved
	if _, serr := tmp.Seek(0, io.SeekStart); serr != nil {
		return "", serr
	}
	log, _ := io.ReadAll(tmp)
	return string(log), err
}

// TestZeroSalvagedShardsResume: three ranks keep buddy copies of their
// shards; after step 8 the survivors of a lost rank write what they
// hold, and a resume assembles step 8 from it: at the same world size
// the run goes on bit for bit as the uninterrupted one, at two ranks
// within zeroTolerance; a CNN's BatchNorm statistics come back as they
// stood at step 8, though the forward of step 9 ran before the loss. Whichever one rank was lost, the other two hold every
// shard; where a shard and its buddy are both lost, or a piece is not
// one (missing, a FIFO, a link to /dev/zero, cut short, four bytes of
// it or of the model flipped, of another step, nobody's, a head that is
// not JSON), the resume says why and goes on from
// the periodic checkpoint of step 5, never hanging or filling memory.
// Two processes of two local replicas each resume as well.
func TestZeroSalvagedShardsResume(t *testing.T) {
	// run returns rank 0's report, its losses the mean over the ranks.
	model, midStep, devices := "toy", "", "1"
	run := func(dir, phase string, ranks int, survivors string) ddptest.Report {
		cmds, outs := ddptest.Launch(t, "zero-salvage", ranks, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_DIR="+dir,
			"XLADDP_TEST_PHASE="+phase, "XLADDP_TEST_SURVIVORS="+survivors, "XLADDP_TEST_MODEL="+model, "XLADDP_TEST_MIDSTEP="+midStep,
			"XLADDP_TEST_DEVICES="+devices)
		reps := ddptest.WaitReports(t, cmds, outs)
		mean := make([]float64, salvageAfter)
		for r, rep := range reps {
			require.Empty(t, rep.Error, "rank %d (%s)", r, phase)
			require.Len(t, rep.Losses, salvageAfter)
			for s, l := range rep.Losses {
				mean[s] += float64(l) / float64(ranks)
			}
		}
		rep := reps[0]
		for s, m := range mean {
			rep.Losses[s] = float32(m)
		}
		return rep
	}
	salvaged := func(t *testing.T, survivors string) (dir string, uninterrupted ddptest.Report) {
		dir = t.TempDir()
		rep := run(dir, "salvage", 3, survivors)
		require.DirExists(t, filepath.Join(dir, fmt.Sprintf("step-%012d.salvage", salvageAt)))
		return dir, rep
	}
	for _, lost := range []string{"0", "1", "2"} {
		t.Run("rank "+lost+" lost", func(t *testing.T) {
			survivors := strings.Join(slices.DeleteFunc([]string{"0", "1", "2"}, func(r string) bool { return r == lost }), ",")
			dir, want := salvaged(t, survivors)
			rep := run(dir, "resume", 3, "")
			assert.Contains(t, rep.Hashes["log"], "step 8 assembled from the shards the survivors of a lost peer held")
			assert.EqualValues(t, salvageAt, rep.Counters["resumed"])
			assert.Equal(t, want.Losses, rep.Losses, "resumed at the same world size: bit for bit")
			assert.Equal(t, want.Hashes["model"], rep.Hashes["model"], "the same weights at the end")
			entries, err := filepath.Glob(filepath.Join(dir, "*.salvage"))
			require.NoError(t, err)
			assert.Empty(t, entries, "the salvage directory is cleared once assembled")
		})
	}
	t.Run("a CNN with BatchNorm, rank 1 lost in the next step's exchange", func(t *testing.T) {
		model, midStep = "cnn", "1"
		defer func() { model, midStep = "toy", "" }()
		dir, want := salvaged(t, "0,2")
		rep := run(dir, "resume", 3, "")
		assert.EqualValues(t, salvageAt, rep.Counters["resumed"])
		assert.Equal(t, want.Losses, rep.Losses)
		assert.Equal(t, want.Hashes["model"], rep.Hashes["model"], "its running statistics too: bit for bit")
	})
	t.Run("rank 1 killed before its update", func(t *testing.T) {
		_, want := salvaged(t, "0,1,2")
		dir := t.TempDir()
		cmds, outs := ddptest.Launch(t, "zero-salvage", 3, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_DIR="+dir, "XLADDP_TEST_PHASE=salvage",
			"XLADDP_TEST_SURVIVORS=0,2", "XLADDP_TEST_MODEL=toy", "XLADDP_TEST_MIDSTEP=1", "XLADDP_TEST_VICTIM=1")
		for r, rep := range ddptest.WaitReports(t, cmds, outs) {
			if r != 1 {
				require.Empty(t, rep.Error, "rank %d", r)
				assert.EqualValues(t, 1, rep.Counters["salvaged"], "rank %d's step failed for the lost peer and it salvaged", r)
			}
		}
		rep := run(dir, "resume", 3, "")
		assert.Contains(t, rep.Hashes["log"], "step 8 assembled")
		assert.Equal(t, want.Losses, rep.Losses, "resumed at the same world size: bit for bit")
		assert.Equal(t, want.Hashes["model"], rep.Hashes["model"])
	})
	t.Run("2 processes of 2 replicas, rank 0 lost", func(t *testing.T) {
		devices = "2"
		defer func() { devices = "1" }()
		dir := t.TempDir()
		want := run(dir, "salvage", 2, "1") // rank 1 holds its replicas' pieces and rank 0's
		rep := run(dir, "resume", 2, "")
		assert.Contains(t, rep.Hashes["log"], "step 8 assembled")
		assert.Equal(t, want.Losses, rep.Losses, "resumed at the same world size: bit for bit")
		assert.Equal(t, want.Hashes["model"], rep.Hashes["model"])
	})
	t.Run("at two ranks", func(t *testing.T) {
		dir, want := salvaged(t, "0,2")
		rep := run(dir, "resume", 2, "")
		assert.EqualValues(t, salvageAt, rep.Counters["resumed"])
		for s, w := range want.Losses {
			assert.InDelta(t, w, rep.Losses[s], zeroTolerance*float64(abs32(w)), "step %d", salvageAt+s+1)
		}
	})
	piece := func(dir string, replica int) string {
		return filepath.Join(dir, fmt.Sprintf("step-%012d.salvage", salvageAt), fmt.Sprintf("piece-%05d-of-00003.safetensors", replica))
	}
	for _, c := range []struct {
		name, why string
		spoil     func(t *testing.T, dir string)
	}{
		{"a shard and its buddy lost", "replica 1's shard of step 8 is not among the survivors'", func(t *testing.T, dir string) {}},
		{"a FIFO", "is a FIFO, not a regular file", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(piece(dir, 0)))
			require.NoError(t, syscall.Mkfifo(piece(dir, 0), 0o644))
		}},
		{"a link to /dev/zero", "is a character device, not a regular file", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(piece(dir, 0)))
			require.NoError(t, os.Symlink("/dev/zero", piece(dir, 0)))
		}},
		{"cut short", "changed since a survivor wrote it", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(piece(dir, 0), 100))
		}},
		{"four bytes flipped", "replica 0's piece of step 8: piece-00000-of-00003.safetensors changed since a survivor wrote it",
			func(t *testing.T, dir string) { flip(t, piece(dir, 0)) }},
		{"the model's bytes flipped", "step 8's model: model-00000.safetensors changed since a survivor wrote it",
			func(t *testing.T, dir string) {
				flip(t, filepath.Join(filepath.Dir(piece(dir, 0)), "model-00000.safetensors"))
			}},
		{"a piece nobody vouched for", "no survivor says it wrote it", func(t *testing.T, dir string) {
			for _, sums := range []string{"sums-00000.json", "sums-00001.json"} {
				require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(piece(dir, 0)), sums), []byte("{}"), 0o644))
			}
		}},
		{"of another step", "changed since a survivor wrote it", func(t *testing.T, dir string) {
			other := filepath.Join(dir, fmt.Sprintf("step-%012d.salvage", salvageAt-1))
			require.NoError(t, os.Rename(filepath.Join(other, "piece-00000-of-00003.safetensors"), piece(dir, 0)))
		}},
		{"a head that is not JSON", "not valid JSON", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(piece(dir, 0)), "head-00000.json"), []byte("{"), 0o644))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			survivors := "0,1"
			if c.name == "a shard and its buddy lost" {
				survivors = "0" // rank 1's shard lives on ranks 1 and 2
			}
			dir, _ := salvaged(t, survivors)
			c.spoil(t, dir)
			rep := run(dir, "resume", 3, "")
			assert.EqualValues(t, salvagePeriodic, rep.Counters["resumed"], "%s", rep.Hashes["log"])
			assert.Contains(t, rep.Hashes["log"], c.why)
			assert.Contains(t, rep.Hashes["log"], "the job resumes from its last periodic checkpoint, step 5")
			assert.NotContains(t, rep.Hashes["log"], "step 7:", "step 7's directory, which no survivor's loop ended at, is no candidate")
			assert.DirExists(t, filepath.Join(dir, "step-000000000008.salvage-refused"), "kept for a look")
			left, err := filepath.Glob(filepath.Join(dir, "*.salvage"))
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

func abs32(x float32) float32 { return max(x, -x) }

// flip inverts four bytes near the end of the file at path (data, past
// the header).
func flip(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for i := len(data) - 12; i < len(data)-8; i++ {
		data[i] ^= 0xff
	}
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// TestZeroBuddyCopiesAgreeOnTheKnob: a value of XLADDP_ZERO_BUDDIES that
// one rank cannot read, or one that differs between ranks, is every
// rank's error, naming the rank, before any step.
func TestZeroBuddyCopiesAgreeOnTheKnob(t *testing.T) {
	for value, want := range map[string]string{
		"maybe": "reading $XLADDP_ZERO_BUDDIES failed on rank(s) [1]",
		"off":   "$XLADDP_ZERO_BUDDIES is off on rank(s) [1] and on elsewhere: give every node the same value",
	} {
		t.Run(value, func(t *testing.T) {
			cmds, outs := ddptest.Launch(t, "zero-salvage", 3, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_DIR="+t.TempDir(),
				"XLADDP_TEST_PHASE=salvage", "XLADDP_TEST_RANK1_BUDDIES="+value)
			for r, rep := range ddptest.WaitReports(t, cmds, outs) {
				if r == 1 && value == "maybe" {
					assert.Contains(t, rep.Error, `$XLADDP_ZERO_BUDDIES="maybe": want on or off (1 or 0, true or false) (on rank 1)`)
					continue
				}
				assert.Contains(t, rep.Error, want, "rank %d", r)
			}
		})
	}
}
