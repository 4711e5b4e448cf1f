package training_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/internal/cli"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// stopWith trains the fixture's loop and, after stop steps and then
// before, ends it with cause as the program does (err = loop.End(ctx,
// err)); it returns End's error.
func stopWith(t *testing.T, o checkpoint.Options, stop int, cause error, before func()) error {
	f := newFixture(t, o)
	for range f.steps(t, 0) {
		if f.loop.Position().Step+1 == stop {
			break
		}
	}
	before()
	return f.loop.End(f.ctx, cause)
}

// TestLoopEndCommitsOnAPeersLoss: a loop ended by a peer's loss commits
// the last step it completed (none periodic was due), says so with its
// note to ddprun, and returns an error that exits 75; the same command
// resumes at that very step and trains the uninterrupted run's samples.
// A loop ended by another error, or by none, commits nothing more.
func TestLoopEndCommitsOnAPeersLoss(t *testing.T) {
	whole, _, _ := run(t, checkpoint.Options{}, 0)
	flight := t.TempDir()
	t.Setenv(workerenv.FlightDir, flight)
	o := checkpoint.Options{Dir: t.TempDir(), Every: 100}
	lost := &dist.PeerError{Rank: 2, Op: "AllReduce #21", Err: dist.ErrPeerClosed}
	err := stopWith(t, o, 7, lost, func() {})
	require.ErrorIs(t, err, checkpoint.ErrPreempted)
	assert.Equal(t, workerenv.ExitPreempted, cli.Status(err), "the worker exits 75")
	assert.NotContains(t, err.Error(), "preempted", "said without a preemption's words")
	assert.ErrorContains(t, err, "a peer was lost (ddp: AllReduce #21: rank 2: connection closed")
	assert.ErrorContains(t, err, "after step 7, the last this replica completed; committed: "+filepath.Join(o.Dir, "step-000000000007.safetensors"))
	note := workerenv.ReadPeerLossNote(flight, 0)
	assert.True(t, strings.HasPrefix(note, workerenv.Committed), note)

	rest, at, resumed := run(t, o, 0)
	assert.Contains(t, resumed, "resumed from "+o.Dir+" at step 7 (epoch 1, sample 35 of its order), the last step completed "+
		"when rank 0 lost a peer (rank 2 in AllReduce #21: connection closed): no completed step is redone")
	assert.Contains(t, resumed, "no completed step is redone")
	assert.Equal(t, whole[7:], rest, "the resumed run's samples are the uninterrupted run's from step 8 on")
	assert.Equal(t, 16, at.Step)

	for _, tc := range []struct {
		name  string
		cause error
	}{
		{"the program's error", errors.New("the loss is NaN")},
		{"a mismatch", &dist.PeerError{Rank: 1, Err: dist.ErrMismatch}},
		{"the job's SIGTERM commit", checkpoint.ErrPreempted},
		{"none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := checkpoint.Options{Dir: t.TempDir(), Every: 100}
			err := stopWith(t, o, 3, tc.cause, func() {})
			if tc.cause == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.cause, "returned as it came")
			}
			names, _ := filepath.Glob(filepath.Join(o.Dir, "step-*"))
			assert.Empty(t, names, "nothing committed")
		})
	}
	// A directory that no longer takes the file: the error says the
	// commit failed, and is no preemption (ddprun then restarts from the
	// last periodic checkpoint).
	o = checkpoint.Options{Dir: t.TempDir(), Every: 100}
	err = stopWith(t, o, 3, lost, func() {
		require.NoError(t, os.RemoveAll(o.Dir))
		require.NoError(t, os.WriteFile(o.Dir, nil, 0o644))
	})
	assert.ErrorContains(t, err, "could not commit step 3, the last it completed")
	assert.NotErrorIs(t, err, checkpoint.ErrPreempted)
}
