package zero

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// A sharded checkpoint is a directory: LATEST names the committed
// version, a subdirectory holding manifest.json, model.safetensors (the
// module's state dict, from global replica 0) and one
// shard-<replica>-of-<replicas>.safetensors per replica (its optimizer
// state and master shards). LATEST is replaced atomically only once every
// file of the new version is written and the manifest (with every file's
// SHA-256) is: a crash at any point leaves the previous version loadable.
const (
	zeroFormat   = "xladdp-zero1/1"
	latestName   = "LATEST"
	manifestName = "manifest.json"
	modelName    = "model.safetensors"
)

// zeroManifest describes one version of a sharded checkpoint.
type zeroManifest struct {
	Format          string            `json:"format"`
	ID              string            `json:"id"`
	Replicas        int               `json:"replicas"`
	Step            int               `json:"step"`
	Epoch           int               `json:"epoch"`
	LR              float64           `json:"lr"`
	Optimizer       string            `json:"optimizer"`
	Hyperparameters string            `json:"hyperparameters"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Params          []manifestParam   `json:"params"`
	Buckets         []manifestBucket  `json:"buckets"`
	Model           manifestFile      `json:"model"`
	Shards          []manifestFile    `json:"shards"`
}

type manifestParam struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Dims  []int  `json:"dims"`
	Group int    `json:"group"`
}

type manifestBucket struct {
	Group   int              `json:"group"`
	DType   string           `json:"dtype"`
	Length  int              `json:"length"`
	Padded  int              `json:"padded"`
	Members []manifestMember `json:"members"`
}

type manifestMember struct {
	Param  int `json:"param"`
	Offset int `json:"offset"`
}

type manifestFile struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// shardRecord is what a replica reports of its shard file.
type shardRecord struct {
	Replica int          `json:"replica"`
	Err     string       `json:"err,omitempty"`
	File    manifestFile `json:"file"`
}

func shardFileName(replica, replicas int) string {
	return fmt.Sprintf("shard-%05d-of-%05d.safetensors", replica, replicas)
}

// SaveSharded writes c (its Optimizer z) to the directory dir: every
// replica its own shard, global replica 0 the model and the manifest,
// committed atomically as a whole (LATEST). It returns on every replica
// once the new version is committed; an error on any replica is every
// replica's. Every replica calls it at the same point; dir must be one
// directory every rank sees (a shared file system across nodes). Older
// versions are removed once the new one is committed. LoadSharded resumes
// it at any world size; ConsolidateCheckpoint turns it into one file for
// checkpoint.Load and torch. Call it through ddp/checkpoint's Save and
// Checkpointer, which dispatch on the optimizer.
func (z *ZeroRedundancyOptimizer) SaveSharded(ctx context.Context, dir string, c optim.Checkpoint) error {
	if c.Optimizer != optim.Optimizer(z) {
		return fmt.Errorf("zero: SaveSharded of a checkpoint whose optimizer is a %T, not this ZeroRedundancyOptimizer", c.Optimizer)
	}
	if c.Model == nil || c.Step < 0 || c.Epoch < 0 {
		return fmt.Errorf("zero: SaveSharded: a model and a non-negative step (%d) and epoch (%d) are needed", c.Step, c.Epoch)
	}
	if err := z.save(ctx, dir, c); err != nil {
		return fmt.Errorf("zero: saving %s on replica %d: %w", dir, z.replica, err)
	}
	return nil
}

func (z *ZeroRedundancyOptimizer) save(ctx context.Context, dir string, c optim.Checkpoint) error {
	if err := z.dev.MarkStep(ctx); err != nil {
		return err
	}
	timeout := exchange.Timeout(z.pg)
	id, err := exchange.HostOnce(ctx, z.dev, timeout, "starting the checkpoint", func() (string, error) {
		return z.startVersion(ctx, dir, c.Step)
	})
	if err != nil {
		return err
	}
	version := filepath.Join(dir, id)
	rec := shardRecord{Replica: z.replica}
	if err := z.writeShard(ctx, version, id, c.RNG, &rec.File); err != nil {
		rec.Err = err.Error()
	}
	var model manifestFile
	var modelErr error
	if z.replica == 0 {
		model, modelErr = writeModel(ctx, version, c.Model)
	}
	records, err := exchange.GatherLocal(ctx, z.dev, timeout, "collecting the shard files", rec)
	if err != nil {
		return err
	}
	_, err = exchange.HostOnce(ctx, z.dev, timeout, "committing the checkpoint", func() (struct{}, error) {
		all, err := z.gatherRecords(ctx, records)
		if err == nil && z.replica == 0 {
			err = modelErr
			if err == nil {
				err = z.commit(dir, id, c, model, all)
			}
		}
		return struct{}{}, exchange.AgreeOnRankZero(ctx, z.pg, err, "committing "+dir)
	})
	return err
}

// startVersion is local replica 0's part: rank 0 names the new version
// and every rank learns the name and makes its directory.
func (z *ZeroRedundancyOptimizer) startVersion(ctx context.Context, dir string, step int) (string, error) {
	var nonce [8]byte
	var err error
	if z.pg.Rank() == 0 {
		_, err = rand.Read(nonce[:])
	}
	words := []int64{int64(step), 0}
	for i, b := range nonce {
		words[1] |= int64(b) << (8 * i)
	}
	if err := exchange.AgreeOnRankZero(ctx, z.pg, err, "naming the checkpoint"); err != nil {
		return "", err
	}
	if err := z.pg.Broadcast(ctx, dist.Int64s(words), 0); err != nil {
		return "", err
	}
	id := fmt.Sprintf("step-%d-%016x", words[0], uint64(words[1]))
	// A directory that cannot be made fails each replica's shard write,
	// which every replica learns of before anything is committed.
	_ = os.MkdirAll(filepath.Join(dir, id), 0o755)
	return id, nil
}

// rngName is a shard's tensor holding its replica's random state
// (optim.Checkpoint.RNG), which a resume at the same replica count gives
// that replica back.
const rngName = "rng.device"

// writeShard writes this replica's state and master shards, and its
// random state when rng is set.
func (z *ZeroRedundancyOptimizer) writeShard(ctx context.Context, version, id string, rng *xla.Device, file *manifestFile) error {
	named := z.State()
	if rng != nil {
		named = append(named, nn.Named{Name: rngName, Tensor: rng.RNGState()})
	}
	tensors, err := nn.EncodeTensors(ctx, named)
	if err != nil {
		return err
	}
	meta := map[string]string{"format": zeroFormat, "id": id, "replica": strconv.Itoa(z.replica), "replicas": strconv.Itoa(z.replicas)}
	name := shardFileName(z.replica, z.replicas)
	*file, err = writeVerified(filepath.Join(version, name), safetensors.File{Metadata: meta, Tensors: tensors})
	return err
}

// writeModel writes the module's state dict.
func writeModel(ctx context.Context, version string, m nn.Module) (manifestFile, error) {
	tensors, err := nn.EncodeTensors(ctx, nn.StateDict(m))
	if err != nil {
		return manifestFile{}, err
	}
	return writeVerified(filepath.Join(version, modelName), safetensors.File{Tensors: tensors})
}

// writeVerified writes f atomically and returns its name, size and hash.
func writeVerified(path string, f safetensors.File) (manifestFile, error) {
	data, err := safetensors.Encode(f)
	if err != nil {
		return manifestFile{}, err
	}
	if err := safetensors.WriteAtomic(path, data); err != nil {
		return manifestFile{}, err
	}
	sum := sha256.Sum256(data)
	return manifestFile{Name: filepath.Base(path), Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// gatherRecords collects every replica's shard record on every rank, in
// replica order, and fails if any replica failed.
func (z *ZeroRedundancyOptimizer) gatherRecords(ctx context.Context, local []shardRecord) ([]shardRecord, error) {
	mine, err := json.Marshal(local)
	if err != nil {
		return nil, err
	}
	blobs, err := exchange.AllGatherBytes(ctx, z.pg, mine)
	if err != nil {
		return nil, err
	}
	all := make([]shardRecord, 0, z.replicas)
	for r, blob := range blobs {
		var recs []shardRecord
		if err := json.Unmarshal(blob, &recs); err != nil {
			return nil, fmt.Errorf("rank %d's shard records: %w", r, err)
		}
		all = append(all, recs...)
	}
	for i, rec := range all {
		if rec.Err != "" {
			return nil, fmt.Errorf("replica %d could not write its shard: %s", rec.Replica, rec.Err)
		}
		if rec.Replica != i {
			return nil, fmt.Errorf("shard records out of order: replica %d in place %d", rec.Replica, i)
		}
	}
	return all, nil
}

// commit is global replica 0's last part: the manifest, then LATEST, then
// the older versions go.
func (z *ZeroRedundancyOptimizer) commit(dir, id string, c optim.Checkpoint, model manifestFile, records []shardRecord) error {
	m := z.manifestOf(id, c)
	m.Model = model
	for _, r := range records {
		m.Shards = append(m.Shards, r.File)
	}
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := safetensors.WriteAtomic(filepath.Join(dir, id, manifestName), data); err != nil {
		return err
	}
	if err := safetensors.WriteAtomic(filepath.Join(dir, latestName), []byte(id+"\n")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // committed; the old versions stay
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") && e.Name() != id {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// manifestOf is c's manifest as version id, without its files.
func (z *ZeroRedundancyOptimizer) manifestOf(id string, c optim.Checkpoint) zeroManifest {
	m := zeroManifest{Format: zeroFormat, ID: id, Replicas: z.replicas, Step: c.Step, Epoch: c.Epoch, LR: z.LR(),
		Optimizer: fmt.Sprintf("%T", z.inner), Hyperparameters: optim.HyperparametersJSON(z.inner), Metadata: optim.ConfigMetadata(c.Model, c.Metadata)}
	for i, p := range z.params {
		m.Params = append(m.Params, manifestParam{Name: p.Name, DType: p.Tensor.DType().String(), Dims: p.Tensor.Dims(), Group: z.groupOf[i]})
	}
	for _, b := range z.buckets {
		mb := manifestBucket{Group: b.group, DType: b.DType.String(), Length: b.Length, Padded: b.Padded}
		for _, mem := range b.Members {
			mb.Members = append(mb.Members, manifestMember{Param: mem.Param, Offset: mem.Offset})
		}
		m.Buckets = append(m.Buckets, mb)
	}
	return m
}

// agree tells every replica whether what succeeded on all of them: err is
// this replica's outcome. A replica that failed returns its own error;
// the others name where it failed.
func (z *ZeroRedundancyOptimizer) agree(ctx context.Context, what string, err error) error {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	timeout := exchange.Timeout(z.pg)
	msgs, gerr := exchange.GatherLocal(ctx, z.dev, timeout, what, msg)
	if gerr != nil {
		return errors.Join(err, gerr)
	}
	localFailed := false
	for _, m := range msgs {
		localFailed = localFailed || m != ""
	}
	failed, herr := exchange.HostOnce(ctx, z.dev, timeout, what, func() ([]int, error) {
		status := int32(0)
		if localFailed {
			status = 1
		}
		all, err := z.allGatherFlags(ctx, status)
		if err != nil {
			return nil, err
		}
		var ranks []int
		for r, s := range all {
			if s != 0 && r != z.pg.Rank() {
				ranks = append(ranks, r)
			}
		}
		return ranks, nil
	})
	switch {
	case err != nil:
		return err
	case herr != nil:
		return herr
	}
	for i, m := range msgs {
		if m != "" {
			return fmt.Errorf("%s failed on local replica %d: %s", what, i, m)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s failed on rank(s) %v (their errors say why)", what, failed)
	}
	return nil
}
