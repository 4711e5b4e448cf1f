package checkpoint

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/internal/readlimit"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// Save writes c (model, optimizer state, step and epoch; see
// optim.Checkpoint) to path, atomically, and returns on every replica of
// the job only once it is complete; every replica calls it at the same
// point, and an error on one is every replica's. For a plain optimizer
// path is one file written by global replica 0 (torch's "save on rank 0,
// then barrier"), a temporary file renamed over path so that a crash
// leaves the previous checkpoint whole; with c.RNG every replica's random
// state is saved, and Load at the same replica count gives each its own
// back. For an optimizer sharded over the replicas
// (optim.ShardedOptimizer: ddp/zero's) path is a directory that every
// replica writes its shard into, resumable at any replica count.
func Save(ctx context.Context, path string, c optim.Checkpoint) error {
	if s, ok := c.Optimizer.(optim.ShardedOptimizer); ok {
		return s.SaveSharded(ctx, path, c)
	}
	if err := CheckFileTarget(path); err != nil {
		return err
	}
	return saveOnRankZero(ctx, path, c, func(take func() (optim.Snapshot, error)) error {
		snap, err := take()
		if err != nil {
			return err
		}
		var s safetensors.Streamer
		return snap.WriteFile(path, &s)
	})
}

// readCheckpointFile reads a checkpoint file: a regular file, read to
// the size it has (a device, a FIFO, a directory or a symlink loop is
// refused by name before anything is read or waited for).
func readCheckpointFile(ctx context.Context, path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): name a checkpoint file", path, info.Mode().Type())
	}
	return readlimit.ReadFile(ctx, path, info.Size(), nil)
}

// CheckFileTarget refuses a path a checkpoint file would replace but
// must not: a device, a FIFO, a socket, a directory or a symbolic link
// (the atomic rename puts a new file where it was: /dev/null would become
// a file). A missing path, or a regular file to overwrite, passes.
func CheckFileTarget(path string) error {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	case info.Mode().IsRegular():
		return nil
	case info.IsDir():
		return fmt.Errorf("checkpoint: %s is a directory: name a file for the checkpoint (or a directory's new file in it)", path)
	case info.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("checkpoint: %s is a symbolic link, which the atomic write would replace: name the file it points to", path)
	}
	return fmt.Errorf("checkpoint: %s is not a regular file (%s): a checkpoint would replace it; name a file", path, info.Mode().Type())
}

// checkpointOnce runs save once for this process's replicas, after a
// MarkStep of every local replica together (so replica 0 reads values
// without a MarkStep the others would have to join); take, which save
// may call, takes c's snapshot with every replica's random state
// (gathered on every replica first).
func checkpointOnce(ctx context.Context, dev *xla.Device, g *dist.ProcessGroup, what string, c optim.Checkpoint, save func(take func() (optim.Snapshot, error)) error) error {
	if err := dev.MarkStep(ctx); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", what, err)
	}
	rngs, err := replicaRNGs(ctx, dev, g, c)
	if err != nil {
		return err
	}
	_, err = exchange.HostOnce(ctx, dev, exchange.Timeout(g), what, func() (struct{}, error) {
		return struct{}{}, save(func() (optim.Snapshot, error) {
			snap, err := optim.TakeSnapshot(ctx, c)
			if err != nil {
				return snap, fmt.Errorf("checkpoint: checkpoint of step %d: %w", c.Step, err)
			}
			if rngs != nil {
				snap.Tensors = append(snap.Tensors, replicaRNGSource(c.RNG, rngs))
			}
			return snap, nil
		})
	})
	return err
}

// SaveStateDict writes m's state dict with torch's names (nn.SaveStateDict:
// what safetensors.torch.load_file and load_state_dict read) as
// Save writes a checkpoint: from global replica 0 only,
// atomically, returning on every replica once the file is complete. Every
// replica calls it at the same point.
func SaveStateDict(ctx context.Context, path string, m nn.Module, metadata map[string]string) error {
	return saveOnRankZero(ctx, path, optim.Checkpoint{Model: m}, func(func() (optim.Snapshot, error)) error {
		return nn.SaveStateDict(ctx, path, m, metadata)
	})
}

// saveOnRankZero runs write (see checkpointOnce) on global replica 0 and
// hands its outcome to every replica of the job.
func saveOnRankZero(ctx context.Context, path string, c optim.Checkpoint, write func(take func() (optim.Snapshot, error)) error) error {
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return err
	}
	g := dist.Current()
	return checkpointOnce(ctx, dev, g, "writing "+path, c, func(take func() (optim.Snapshot, error)) error {
		var saveErr error
		if g.Rank() == 0 {
			saveErr = write(take)
		}
		return exchange.AgreeOnRankZero(ctx, g, saveErr, "saving "+path)
	})
}

// Load restores c.Model and c.Optimizer from path and sets c.Step,
// c.Epoch and c.Metadata, on every replica, all or nothing; path is what
// Save wrote for this kind of optimizer, and a checkpoint of the other
// kind is refused, saying how to resume it. A single file is read once
// per process (every rank must see it: a shared or copied directory) and
// handed to its local replicas, and the ranks check that they read the
// same bytes, so a rank that found an older or a different checkpoint is
// an error, not a silent fork. A sharded directory may have been saved at
// any replica count: each replica rebuilds its shards from it.
func Load(ctx context.Context, path string, c *optim.Checkpoint) error {
	k := kindOf(c.Optimizer)
	if info, err := os.Stat(path); err == nil && info.IsDir() != bool(k) {
		return k.refuse(path)
	}
	if s, ok := c.Optimizer.(optim.ShardedOptimizer); ok {
		return s.LoadSharded(ctx, path, c)
	}
	dev, err := checkpointDevice(c.Model)
	if err != nil {
		return err
	}
	g := dist.Current()
	file, err := exchange.HostOnce(ctx, dev, exchange.Timeout(g), "reading the checkpoint", func() (safetensors.File, error) {
		data, err := readCheckpointFile(ctx, path)
		if err != nil {
			return safetensors.File{}, fmt.Errorf("checkpoint: Load on rank %d: %w", g.Rank(), err)
		}
		if err := exchange.SameOnEveryRank(ctx, g, sha256.Sum256(data), path); err != nil {
			return safetensors.File{}, fmt.Errorf("checkpoint: Load: %w", err)
		}
		return safetensors.Decode(path, data)
	})
	if err != nil {
		return err
	}
	return restoreDecoded(dev, file, path, c)
}

// checkpointDevice is the device of the model's tensors.
func checkpointDevice(m nn.Module) (*xla.Device, error) {
	if m == nil {
		return nil, errors.New("checkpoint: checkpoint without a model")
	}
	state := nn.StateDict(m)
	if len(state) == 0 || state[0].Tensor == nil {
		return nil, errors.New("checkpoint: checkpoint of a model with no tensors")
	}
	return state[0].Tensor.Device(), nil
}
