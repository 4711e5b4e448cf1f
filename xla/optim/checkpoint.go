package optim

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// Checkpoint is what a training run saves to resume: the model, the
// optimizer state, and where training was. In the file the model's tensors
// are named "model.<torch name>" and the optimizer's "optimizer.<name>";
// Step, Epoch, the learning rate and the hyperparameters are metadata.
// (A model-only file with plain torch names is nn.SaveStateDict's.)
type Checkpoint struct {
	Model     nn.Module
	Optimizer Optimizer
	Step      int
	Epoch     int
	// Metadata is extra string metadata to store (optional).
	Metadata map[string]string
	// RNG, when set, is the device whose random state (dropout's, every
	// RandN/RandU) is saved and restored, so a resumed run draws what an
	// uninterrupted one would. checkpoint.Save and checkpoint.Checkpointer
	// also save every replica's state ("ddp.replica_rng"), so replicas
	// seeded apart each resume their own.
	RNG *xla.Device
}

const (
	modelPrefix     = "model."
	optimizerPrefix = "optimizer."
	rngPrefix       = "rng."
)

// rngState is c.RNG's random state as a checkpoint names it.
func (c *Checkpoint) rngState() []nn.Named {
	if c.RNG == nil {
		return nil
	}
	return []nn.Named{{Name: "device", Tensor: c.RNG.RNGState()}}
}

func prefixed(prefix string, named []nn.Named) []nn.Named {
	out := make([]nn.Named, len(named))
	for i, n := range named {
		out[i] = nn.Named{Name: prefix + n.Name, Tensor: n.Tensor}
	}
	return out
}

// WriteCheckpointFile writes c, as one device holds it, to path
// atomically (temp file, fsync, rename): the file format under
// ddp/checkpoint, which is the door for training jobs (every replica, the
// ranks agreeing, sharded optimizers).
func WriteCheckpointFile(ctx context.Context, path string, c Checkpoint) error {
	snap, err := TakeSnapshot(ctx, c)
	if err != nil {
		return err
	}
	var s safetensors.Streamer
	return snap.WriteFile(path, &s)
}

// Snapshot is a checkpoint taken at one step and written later: the
// values it names stay as they were when it was taken while training
// goes on (nn.SnapshotTensors), and it may be written on another
// goroutine.
type Snapshot struct {
	Metadata map[string]string
	Tensors  []safetensors.Source
}

// TakeSnapshot takes c as it is now, copying nothing: the part of a save
// that must happen on the step.
func TakeSnapshot(ctx context.Context, c Checkpoint) (Snapshot, error) {
	named := prefixed(modelPrefix, nn.StateDict(c.Model))
	meta := map[string]string{}
	for k, v := range c.Metadata {
		meta[k] = v
	}
	meta = ConfigMetadata(c.Model, meta)
	meta["step"] = strconv.Itoa(c.Step)
	meta["epoch"] = strconv.Itoa(c.Epoch)
	if c.Optimizer != nil {
		named = append(named, prefixed(optimizerPrefix, c.Optimizer.State())...)
		meta["lr"] = strconv.FormatFloat(c.Optimizer.LR(), 'g', -1, 64)
		meta["optimizer"] = HyperparametersJSON(c.Optimizer)
	}
	named = append(named, prefixed(rngPrefix, c.rngState())...)
	sources, err := nn.SnapshotTensors(ctx, named)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Metadata: meta, Tensors: sources}, nil
}

// WriteFile writes the snapshot to path atomically (temp file, fsync,
// rename) through s, one tensor at a time.
func (sn Snapshot) WriteFile(path string, s *safetensors.Streamer) error {
	return s.WriteFile(path, sn.Metadata, sn.Tensors)
}

// Encode is the file WriteFile writes, in memory.
func (sn Snapshot) Encode() ([]byte, error) {
	return safetensors.EncodeSources(sn.Metadata, sn.Tensors)
}

// ReadCheckpointFile restores c.Model and c.Optimizer (if set) from path and
// returns the saved Step, Epoch and metadata. It is all or nothing: the
// metadata, every tensor name, dtype and shape are checked and every
// tensor is uploaded before anything is assigned, so a failed load leaves
// model and optimizer as they were. A mismatch lists every missing,
// unexpected and mis-shaped tensor.
func ReadCheckpointFile(path string, c *Checkpoint) error {
	file, err := safetensors.ReadFile(path)
	if err != nil {
		return err
	}
	return RestoreCheckpoint(file, path, c)
}

// RestoreCheckpoint is ReadCheckpointFile from a decoded file; path names it
// in errors.
func RestoreCheckpoint(file safetensors.File, path string, c *Checkpoint) error {
	step, epoch, lr, err := checkpointMetadata(file, path, c)
	if err != nil {
		return err
	}
	model, rng, opt, err := stageCheckpoint(file, path, c)
	if err != nil {
		return err
	}
	model.Commit()
	if rng != nil {
		rng.Commit()
	}
	if opt != nil {
		opt.Commit()
		c.Optimizer.SetLR(lr)
	}
	c.Step, c.Epoch = step, epoch
	c.Metadata = file.Metadata
	return nil
}

// checkpointMetadata reads the file's step, epoch and (for c's optimizer)
// learning rate, and checks its configuration against c's model.
func checkpointMetadata(file safetensors.File, path string, c *Checkpoint) (step, epoch int, lr float64, err error) {
	step, errStep := strconv.Atoi(file.Metadata["step"])
	epoch, errEpoch := strconv.Atoi(file.Metadata["epoch"])
	if errStep != nil || errEpoch != nil {
		return 0, 0, 0, fmt.Errorf("optim: %s is not a training checkpoint (no step/epoch metadata; for a model-only file use nn.LoadStateDict)", path)
	}
	if step < 0 || epoch < 0 {
		return 0, 0, 0, fmt.Errorf("optim: %s: negative step %d or epoch %d", path, step, epoch)
	}
	if err := CheckConfig(c.Model, file.Metadata, path); err != nil {
		return 0, 0, 0, err
	}
	if c.Optimizer != nil {
		if _, ok := file.Metadata["optimizer"]; !ok {
			return 0, 0, 0, fmt.Errorf("optim: %s holds no optimizer state", path)
		}
		lr, err = strconv.ParseFloat(file.Metadata["lr"], 64)
		if err != nil || lr < 0 || math.IsInf(lr, 0) || math.IsNaN(lr) {
			return 0, 0, 0, fmt.Errorf("optim: %s: learning rate metadata %q is not a non-negative number", path, file.Metadata["lr"])
		}
	}
	return step, epoch, lr, nil
}

// stageCheckpoint checks the file's tensors against c's model, random
// state and optimizer, and uploads them, for the caller to commit; rng
// and opt are nil where c has none.
func stageCheckpoint(file safetensors.File, path string, c *Checkpoint) (model, rng, opt *nn.Staged, err error) {
	// Check both parts before uploading either, so one error lists both.
	modelTensors := nn.StateDict(c.Model)
	if err := nn.CheckTensors(modelTensors, file, modelPrefix, path); err != nil {
		return nil, nil, nil, err
	}
	var optTensors []nn.Named
	if c.Optimizer != nil {
		optTensors = c.Optimizer.State()
		if err := nn.CheckTensors(optTensors, file, optimizerPrefix, path); err != nil {
			return nil, nil, nil, err
		}
	}
	if c.RNG != nil {
		if _, ok := file.Lookup(rngPrefix + "device"); !ok {
			return nil, nil, nil, fmt.Errorf("optim: %s holds no random state (saved without Checkpoint.RNG): load it without RNG", path)
		}
		if rng, err = nn.StageTensors(c.rngState(), file, rngPrefix, path); err != nil {
			return nil, nil, nil, err
		}
	}
	if model, err = nn.StageTensors(modelTensors, file, modelPrefix, path); err != nil {
		return nil, nil, nil, err
	}
	if c.Optimizer != nil {
		if opt, err = nn.StageTensors(optTensors, file, optimizerPrefix, path); err != nil {
			return nil, nil, nil, err
		}
	}
	return model, rng, opt, nil
}
