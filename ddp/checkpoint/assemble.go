package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// assembleSalvaged turns the newest salvaged step newer than the
// directory's newest sharded checkpoint, when the survivors of a lost
// peer left it whole, into that step's checkpoint, and clears every
// salvage directory. Rank 0 does the files' work; every replica calls it
// at the same point (Restore) and gets its outcome. An optimizer that
// keeps no buddy copies has nothing to assemble.
func (ck *Checkpointer) assembleSalvaged(ctx context.Context, c *optim.Checkpoint) error {
	s, ok := c.Optimizer.(shardSalvager)
	if !ok {
		return nil
	}
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return err
	}
	g := dist.Current()
	_, err = exchange.HostOnce(ctx, dev, exchange.Timeout(g), "assembling the salvaged shards", func() (struct{}, error) {
		var err error
		if g.Rank() == 0 {
			err = ck.assembleNewest(s)
		}
		return struct{}{}, exchange.AgreeOnRankZero(ctx, g, err, "assembling the salvaged shards")
	})
	return err
}

// assembleNewest is rank 0's part of assembleSalvaged.
func (ck *Checkpointer) assembleNewest(s shardSalvager) error {
	salvaged := ck.salvagedSteps()
	if len(salvaged) == 0 {
		return nil
	}
	committed := -1
	if steps := ck.saved(sharded); len(steps) > 0 {
		committed = steps[len(steps)-1]
	}
	var why []string
	var refused []int
	for _, step := range salvaged {
		if step <= committed {
			break
		}
		final := ck.path(step, sharded)
		partial := final + ".partial"
		_ = os.RemoveAll(partial)
		if err := s.AssembleSalvaged(ck.salvageDir(step), partial, step); err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // else no survivor's loop ended there
				why = append(why, fmt.Sprintf("step %d: %v", step, err))
				refused = append(refused, step)
			}
			_ = os.RemoveAll(partial)
			continue
		}
		if err := os.Rename(partial, final); err != nil {
			return fmt.Errorf("checkpoint: committing the assembled %s: %w", final, err)
		}
		if err := safetensors.SyncDir(ck.opts.Dir); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "checkpoint: step %d assembled from the shards the survivors of a lost peer held: %s\n", step, final)
		why, refused = nil, nil
		break
	}
	if len(why) > 0 {
		from := "the start (no checkpoint)"
		if committed >= 0 {
			from = fmt.Sprintf("its last periodic checkpoint, step %d", committed)
		}
		fmt.Fprintf(os.Stderr, "checkpoint: the shards the survivors of a lost peer held make no whole step (%s): the job resumes from %s; "+
			"what they held stays in %s for a look\n", strings.Join(why, "; "), from, ck.refusedDir(refused[0]))
	}
	ck.clearSalvaged(salvaged, refused)
	ck.prune(sharded)
	return nil
}

// refusedSuffix marks a salvage directory that made no step, kept for a
// look (the newest only).
const refusedSuffix = ".salvage-refused"

func (ck *Checkpointer) refusedDir(step int) string { return ck.path(step, sharded) + refusedSuffix }

// clearSalvaged removes the salvage directories of salvaged but the
// newest refused one, which it keeps under refusedDir (replacing older
// ones).
func (ck *Checkpointer) clearSalvaged(salvaged, refused []int) {
	if len(refused) > 0 {
		old, _ := filepath.Glob(filepath.Join(ck.opts.Dir, "step-*"+refusedSuffix))
		for _, o := range old {
			_ = os.RemoveAll(o)
		}
		_ = os.Rename(ck.salvageDir(refused[0]), ck.refusedDir(refused[0]))
	}
	for _, step := range salvaged {
		_ = os.RemoveAll(ck.salvageDir(step))
	}
}

// salvagedSteps lists the steps with a salvage directory, newest first.
func (ck *Checkpointer) salvagedSteps() []int {
	names, _ := filepath.Glob(filepath.Join(ck.opts.Dir, "step-*"+salvageSuffix))
	var steps []int
	for _, n := range names {
		var step int
		if _, err := fmt.Sscanf(filepath.Base(n), "step-%d", &step); err != nil || step < 0 || n != ck.salvageDir(step) {
			continue
		}
		if info, err := os.Lstat(n); err == nil && info.IsDir() {
			steps = append(steps, step)
		}
	}
	slices.Sort(steps)
	slices.Reverse(steps)
	return steps
}
