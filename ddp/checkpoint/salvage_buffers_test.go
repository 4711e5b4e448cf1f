package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

func init() { ddptest.Scenarios["salvage-buffers"] = salvageBuffersScenario }

const salvageBuffersAt = 6

// salvageBuffersScenario trains ddptest's CNN (BatchNorm) wrapped with
// ddp.Wrap and Adam for salvageBuffersAt steps on every rank, in
// $XLADDP_TEST_DEVICES local replicas a rank (1); with
// $XLADDP_TEST_DETERMINISTIC through ddp.Deterministic's micro-shards. Then
// either it saves that step to $XLADDP_TEST_DIR/whole.safetensors, or
// ($XLADDP_TEST_VICTIM set) the next step begins: the victim rank exits
// once its forward is traced (after the buffers' broadcast), the others'
// forward and backward run and their gradient exchange fails for the
// lost peer (with $XLADDP_TEST_EXIT_AFTER the victim exits before that
// step begins, its last one completed), and those in $XLADDP_TEST_SURVIVORS commit what they hold
// (Checkpointer.Salvage in $XLADDP_TEST_DIR/ck), as Loop.End does.
func salvageBuffersScenario(rep *ddptest.Report) {
	ctx := context.Background()
	devices := max(1, atoiOr(os.Getenv("XLADDP_TEST_DEVICES")))
	e, done, err := ddptest.JoinJob(ctx, devices)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	err = e.RunReplicas(ctx, devices, func(ctx context.Context, r xla.Replica) error {
		replica, replicas := dist.Rank()*devices+r.Index(), dist.WorldSize()*devices
		d := r.Device()
		inner, err := ddptest.NewModel(d, "cnn", 7, nil)
		if err != nil {
			return err
		}
		deterministic := os.Getenv("XLADDP_TEST_DETERMINISTIC") != ""
		var opts []ddp.WrapOption
		if deterministic {
			opts = append(opts, ddp.Deterministic(ddptest.GlobalRows, 8, 1))
		}
		model, err := ddp.Wrap(ctx, inner, opts...)
		if err != nil {
			return err
		}
		opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamConfig{LR: 0.01})
		if err != nil {
			return err
		}
		victim, lose := strconv.Atoi(os.Getenv("XLADDP_TEST_VICTIM"))
		exitAt := -1 // the step at whose forward the victim exits
		step := func(s int) error {
			opt.ZeroGrad()
			if deterministic {
				_, err := model.BackwardMicroShards(ctx, s, func(m ddp.MicroShard) (*xla.Tensor, error) {
					loss, err := ddptest.LossOn(d, model, "cnn", m.First, m.First+m.Size)
					if s == exitAt {
						os.Exit(3) // its forward traced, before the step's exchange
					}
					return loss, err
				})
				if err != nil {
					return err
				}
			} else {
				rows := ddptest.GlobalRows / replicas
				loss, err := ddptest.LossOn(d, model, "cnn", replica*rows, (replica+1)*rows)
				if s == exitAt {
					os.Exit(3) // after the buffers' broadcast, before the gradient exchange
				}
				if err == nil {
					err = loss.Backward()
				}
				if err != nil {
					return err
				}
			}
			if err := opt.Step(); err != nil {
				return err
			}
			return d.MarkStep(ctx)
		}
		for s := range salvageBuffersAt {
			if err := step(s); err != nil {
				return err
			}
		}
		state := optim.Checkpoint{Model: model, Optimizer: opt, Step: salvageBuffersAt}
		dir := os.Getenv("XLADDP_TEST_DIR")
		if lose != nil {
			return checkpoint.Save(ctx, filepath.Join(dir, "whole.safetensors"), state)
		}
		if dist.Rank() == victim && os.Getenv("XLADDP_TEST_EXIT_AFTER") != "" {
			os.Exit(3) // its step completed, before the next one begins
		}
		if dist.Rank() == victim {
			exitAt = salvageBuffersAt
		}
		err = step(salvageBuffersAt)
		if !dist.PeerLost(err) {
			return errors.Join(errors.New("the step after the loss did not fail for the lost peer"), err)
		}
		if !slices.Contains(strings.Split(os.Getenv("XLADDP_TEST_SURVIVORS"), ","), strconv.Itoa(dist.Rank())) {
			return nil
		}
		ck, err := checkpoint.New(checkpoint.Options{Dir: filepath.Join(dir, "ck")})
		if err != nil {
			return err
		}
		defer ck.Close()
		_, err = ck.Salvage(ctx, state)
		return err
	})
	if err != nil {
		rep.Error = err.Error()
	}
}

func atoiOr(s string) int { n, _ := strconv.Atoi(s); return n }

// TestSalvageKeepsTheCompletedStepsBuffers: a survivor whose gradient
// exchange failed has run that step's forward, which moved BatchNorm's
// running statistics; its commit of the last completed step holds the
// statistics of that step, bit for bit as an uninterrupted save of it,
// in the plain wrapper and the deterministic one, one or two local
// replicas a rank. (The plain wrapper's statistics are each rank's own
// batch's, and a save holds global replica 0's: rank 0 commits alone
// there; the deterministic ones are every replica's alike, and both
// survivors commit.) Global replica 0 lost once its step completed, the
// survivors hold its statistics of that step: the step's exchange ended
// with their broadcast, not the next step's forward.
func TestSalvageKeepsTheCompletedStepsBuffers(t *testing.T) {
	for _, c := range []struct {
		name, deterministic, devices, victim, after, survivors string
	}{
		{"plain", "", "1", "1", "", "0"},
		{"deterministic", "1", "1", "1", "", "0,2"},
		{"plain, 2 local replicas", "", "2", "1", "", "0"},
		{"plain, rank 0 lost after its step", "", "1", "0", "1", "1,2"},
		{"plain, 2 local replicas, rank 0 lost after its step", "", "2", "0", "1", "1,2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			run := func(victim string) []ddptest.Report {
				cmds, outs := ddptest.Launch(t, "salvage-buffers", 3, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_DIR="+dir,
					"XLADDP_TEST_VICTIM="+victim, "XLADDP_TEST_DETERMINISTIC="+c.deterministic, "XLADDP_DETERMINISTIC="+c.deterministic,
					"XLADDP_TEST_DEVICES="+c.devices, "XLADDP_TEST_SURVIVORS="+c.survivors, "XLADDP_TEST_EXIT_AFTER="+c.after)
				return ddptest.WaitReports(t, cmds, outs)
			}
			for r, rep := range run("") {
				require.Empty(t, rep.Error, "rank %d, uninterrupted", r)
			}
			for r, rep := range run(c.victim) {
				if strconv.Itoa(r) != c.victim {
					require.Empty(t, rep.Error, "rank %d, a survivor", r)
				}
			}
			whole, err := safetensors.ReadFile(filepath.Join(dir, "whole.safetensors"))
			require.NoError(t, err)
			salvaged, err := safetensors.ReadFile(filepath.Join(dir, "ck", "step-000000000006.safetensors"))
			require.NoError(t, err)
			checked := 0
			for _, w := range whole.Tensors {
				if filepath.Ext(w.Name) == ".running_mean" || filepath.Ext(w.Name) == ".running_var" || filepath.Ext(w.Name) == ".weight" {
					s, ok := salvaged.Lookup(w.Name)
					require.True(t, ok, "%s", w.Name)
					assert.Equal(t, w.Data, s.Data, "%s: the salvaged step's against the uninterrupted save of it", w.Name)
					checked++
				}
			}
			assert.Greater(t, checked, 3)
		})
	}
}
