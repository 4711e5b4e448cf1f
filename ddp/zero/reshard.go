package zero

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// shardedCheckpoint is a version read whole and checked: every file's
// size and hash against the manifest, every shard's job id and place.
type shardedCheckpoint struct {
	path     string
	manifest zeroManifest
	digest   [32]byte // of the manifest's bytes
	model    safetensors.File
	shards   []map[string]safetensors.Tensor
	// where[p] is parameter p's bucket and offset in the saved layout.
	where []struct{ bucket, offset int }
}

// readShardedCheckpoint reads the version LATEST names in dir.
func readShardedCheckpoint(dir string) (*shardedCheckpoint, error) {
	latest, err := readRegular(filepath.Join(dir, latestName), latestMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s is not a sharded checkpoint (no %s: was it saved with checkpoint.Save and a sharded optimizer?): %w", dir, latestName, err)
	}
	id := strings.TrimSpace(string(latest))
	if !strings.HasPrefix(id, "step-") || strings.ContainsAny(id, `/\`) {
		return nil, fmt.Errorf("%s: %s names %q, not a version of this checkpoint", dir, latestName, id)
	}
	version := filepath.Join(dir, id)
	data, err := readRegular(filepath.Join(version, manifestName), manifestMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	ck := &shardedCheckpoint{path: version, digest: sha256.Sum256(data)}
	if err := json.Unmarshal(data, &ck.manifest); err != nil {
		return nil, fmt.Errorf("%s: the manifest is not valid JSON: %w", version, err)
	}
	if err := ck.checkManifest(id); err != nil {
		return nil, fmt.Errorf("%s: the manifest does not hold together: %w", version, err)
	}
	if ck.model, err = readVerified(version, ck.manifest.Model); err != nil {
		return nil, err
	}
	for r, f := range ck.manifest.Shards {
		file, err := readVerified(version, f)
		if err != nil {
			return nil, err
		}
		m := file.Metadata
		if m["format"] != zeroFormat || m["id"] != ck.manifest.ID || m["replica"] != strconv.Itoa(r) || m["replicas"] != strconv.Itoa(ck.manifest.Replicas) {
			return nil, fmt.Errorf("%s is not shard %d of checkpoint %s (it says shard %s of %s, checkpoint %s)",
				f.Name, r, ck.manifest.ID, m["replica"], m["replicas"], m["id"])
		}
		byName := make(map[string]safetensors.Tensor, len(file.Tensors))
		for _, t := range file.Tensors {
			byName[t.Name] = t
		}
		ck.shards = append(ck.shards, byName)
	}
	return ck, nil
}

// readVerified reads f from dir and checks its size and hash.
func readVerified(dir string, f manifestFile) (safetensors.File, error) {
	if f.Name != filepath.Base(f.Name) || f.Name == "" || f.Name == "." || f.Name == ".." {
		return safetensors.File{}, fmt.Errorf("the manifest names a file %q outside its directory", f.Name)
	}
	path := filepath.Join(dir, f.Name)
	if f.Bytes < 0 {
		return safetensors.File{}, fmt.Errorf("the manifest gives %s %d bytes", f.Name, f.Bytes)
	}
	data, err := readRegular(path, f.Bytes)
	if err != nil {
		return safetensors.File{}, fmt.Errorf("a file of the checkpoint is missing or not the manifest's: %w", err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != f.Bytes || hex.EncodeToString(sum[:]) != f.SHA256 {
		return safetensors.File{}, fmt.Errorf("%s is not the file the manifest lists (%d bytes, SHA-256 %s; the manifest says %d bytes, %s): "+
			"replaced, truncated or from another checkpoint", path, len(data), hex.EncodeToString(sum[:]), f.Bytes, f.SHA256)
	}
	return safetensors.Decode(path, data)
}

// checkManifest checks that the manifest describes a layout it could
// have been saved from: every parameter in exactly one bucket, lengths
// and paddings consistent, one shard file per replica.
func (ck *shardedCheckpoint) checkManifest(id string) error {
	m := &ck.manifest
	switch {
	case m.Format != zeroFormat:
		return fmt.Errorf("format %q, want %q", m.Format, zeroFormat)
	case m.ID != id:
		return fmt.Errorf("it is checkpoint %q but sits in %q", m.ID, id)
	case m.Replicas < 1 || m.Replicas > 1<<20:
		return fmt.Errorf("%d replicas", m.Replicas)
	case len(m.Shards) != m.Replicas:
		return fmt.Errorf("%d shard files for %d replicas", len(m.Shards), m.Replicas)
	case m.Step < 0 || m.Epoch < 0 || !(m.LR >= 0):
		return fmt.Errorf("step %d, epoch %d, learning rate %g", m.Step, m.Epoch, m.LR)
	}
	ck.where = make([]struct{ bucket, offset int }, len(m.Params))
	seen := make([]bool, len(m.Params))
	for b, bucket := range m.Buckets {
		offset := 0
		for _, mem := range bucket.Members {
			if mem.Param < 0 || mem.Param >= len(m.Params) || seen[mem.Param] {
				return fmt.Errorf("bucket %d lists parameter %d, out of range or twice", b, mem.Param)
			}
			p := m.Params[mem.Param]
			if mem.Offset != offset || p.DType != bucket.DType || p.Group != bucket.Group {
				return fmt.Errorf("bucket %d: %s at offset %d (want %d), %s in group %d", b, p.Name, mem.Offset, offset, p.DType, p.Group)
			}
			n, ok := elements(p.Dims)
			if !ok {
				return fmt.Errorf("%s has dims %v", p.Name, p.Dims)
			}
			seen[mem.Param] = true
			ck.where[mem.Param] = struct{ bucket, offset int }{b, offset}
			offset += n
		}
		if offset != bucket.Length || bucket.Padded != (bucket.Length+m.Replicas-1)/m.Replicas*m.Replicas {
			return fmt.Errorf("bucket %d: length %d and padding %d for parameters of %d elements over %d replicas", b, bucket.Length, bucket.Padded, offset, m.Replicas)
		}
	}
	for p, ok := range seen {
		if !ok {
			return fmt.Errorf("%s is in no bucket", m.Params[p].Name)
		}
	}
	return nil
}

// elements is the product of dims, refusing negative and huge shapes.
func elements(dims []int) (int, bool) {
	n := 1
	for _, d := range dims {
		if d < 0 || (d > 0 && n > (1<<40)/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// LoadSharded restores c.Model and c.Optimizer (z, built for this job)
// from the sharded checkpoint in dir, saved at any world size: each
// replica rebuilds its shards from the saved ones. It sets c.Step,
// c.Epoch and c.Metadata. It is all or nothing on every replica: files,
// manifest, layout and optimizer are checked and every tensor is uploaded
// on every replica before anything is assigned, and an error on one
// replica is an error on all. Call it through ddp/checkpoint's Load and
// Checkpointer.
func (z *ZeroRedundancyOptimizer) LoadSharded(ctx context.Context, dir string, c *optim.Checkpoint) error {
	if c.Optimizer != optim.Optimizer(z) {
		return fmt.Errorf("zero: LoadSharded into a checkpoint whose optimizer is a %T, not this ZeroRedundancyOptimizer", c.Optimizer)
	}
	if c.Model == nil {
		return fmt.Errorf("zero: LoadSharded: no model")
	}
	if err := z.load(ctx, dir, c); err != nil {
		return fmt.Errorf("zero: loading %s on replica %d: %w", dir, z.replica, err)
	}
	return nil
}

func (z *ZeroRedundancyOptimizer) load(ctx context.Context, dir string, c *optim.Checkpoint) error {
	timeout := exchange.Timeout(z.pg)
	ck, err := exchange.HostOnce(ctx, z.dev, timeout, "reading the checkpoint", func() (*shardedCheckpoint, error) {
		ck, err := readShardedCheckpoint(dir)
		var digest [32]byte
		if ck != nil {
			digest = ck.digest
		}
		if agreed := z.agreeProcesses(ctx, "reading "+dir, err); agreed != nil {
			return nil, agreed
		}
		return ck, exchange.SameOnEveryRank(ctx, z.pg, digest, filepath.Join(dir, latestName))
	})
	if err != nil {
		return err
	}
	var commit func()
	stageErr := func() error {
		var err error
		commit, err = z.stage(ck, c)
		return err
	}()
	if err := z.agree(ctx, "restoring "+dir, stageErr); err != nil {
		return err
	}
	commit()
	return nil
}

// agreeProcesses is agree between the processes only (local replica 0's
// part, inside hostOnce).
func (z *ZeroRedundancyOptimizer) agreeProcesses(ctx context.Context, what string, err error) error {
	status := int32(0)
	if err != nil {
		status = 1
	}
	all, gerr := z.allGatherFlags(ctx, status)
	if gerr != nil {
		return errors.Join(err, gerr)
	}
	if err != nil {
		return err
	}
	for r, s := range all {
		if s != 0 {
			return fmt.Errorf("%s failed on rank %d (its error says why)", what, r)
		}
	}
	return nil
}

// stage checks ck against this job and uploads every tensor this replica
// will hold; commit assigns them.
func (z *ZeroRedundancyOptimizer) stage(ck *shardedCheckpoint, c *optim.Checkpoint) (func(), error) {
	m := &ck.manifest
	if want := fmt.Sprintf("%T", z.inner); m.Optimizer != want {
		return nil, fmt.Errorf("the checkpoint holds a %s's state, this optimizer is a %s", m.Optimizer, want)
	}
	if err := optim.CheckConfig(c.Model, m.Metadata, manifestName); err != nil {
		return nil, err
	}
	if len(m.Params) != len(z.params) {
		return nil, fmt.Errorf("the checkpoint has %d parameters, the module %d", len(m.Params), len(z.params))
	}
	for i, p := range z.params {
		mp := m.Params[i]
		if mp.Name != p.Name || mp.DType != p.Tensor.DType().String() || fmt.Sprint(mp.Dims) != fmt.Sprint(p.Tensor.Dims()) || mp.Group != z.groupOf[i] {
			return nil, fmt.Errorf("parameter %d is %s %s%v in group %d in the checkpoint but %s %s%v in group %d here",
				i, mp.Name, mp.DType, mp.Dims, mp.Group, p.Name, p.Tensor.DType(), p.Tensor.Dims(), z.groupOf[i])
		}
	}
	model, err := nn.StageTensors(nn.StateDict(c.Model), ck.model, "", filepath.Join(ck.path, modelName))
	if err != nil {
		return nil, err
	}
	state := z.State()
	values := make([]*xla.Tensor, len(state))
	for i, s := range state {
		data, err := ck.shardValue(s.Name, s.Tensor, z.buckets, z.replica, z.replicas)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		if values[i], err = xla.FromBytes(z.dev, s.Tensor.DType(), s.Tensor.Dims(), data); err != nil {
			return nil, fmt.Errorf("uploading %s: %w", s.Name, err)
		}
	}
	rng, err := ck.stageRNG(c.RNG, z.replica, z.replicas)
	if err != nil {
		return nil, err
	}
	return func() {
		model.Commit()
		for i, s := range state {
			_ = s.Tensor.Assign(values[i])
		}
		if rng != nil {
			_ = c.RNG.SetRNGState(rng)
		}
		z.SetLR(m.LR)
		z.updates, z.slots, z.rest = m.Step, nil, [keptSteps]keptRest{} // what was held is of another run
		c.Step, c.Epoch, c.Metadata = m.Step, m.Epoch, m.Metadata
	}, nil
}

// bucketKey splits a state name into its bucket and per-bucket key:
// "master.3" → (3, "master.%d"), "state.3.exp_avg" → (3,
// "state.%d.exp_avg"); ok is false for state held whole by every replica
// ("step").
func bucketKey(name string) (bucket int, key string, ok bool) {
	parts := strings.SplitN(name, ".", 3)
	switch {
	case len(parts) == 2 && parts[0] == "master":
		b, err := strconv.Atoi(parts[1])
		return b, "master.%d", err == nil
	case len(parts) == 3 && parts[0] == "state":
		b, err := strconv.Atoi(parts[1])
		return b, "state.%d." + parts[2], err == nil
	}
	return 0, "", false
}

// shardValue builds the bytes of state tensor name (shaped like like) of
// replica's shard in buckets at replicas, from the saved shards.
func (ck *shardedCheckpoint) shardValue(name string, like *xla.Tensor, buckets []*zeroBucket, replica, replicas int) ([]byte, error) {
	want := nn.SafetensorsDType(like.DType())
	b, key, perBucket := bucketKey(name)
	if !perBucket {
		t, ok := ck.shards[0][name]
		if !ok || t.DType != want || fmt.Sprint(t.Shape) != fmt.Sprint(like.Dims()) {
			return nil, fmt.Errorf("shard 0 holds no %s %s%v", name, want, like.Dims())
		}
		return t.Data, nil
	}
	bucket := buckets[b]
	size := like.DType().Size()
	n := bucket.ShardLen(replicas)
	out := make([]byte, n*size)
	lo, hi := replica*n, (replica+1)*n
	for _, mem := range bucket.Members {
		from, to := max(lo, mem.Offset), min(hi, mem.Offset+mem.Length)
		for from < to {
			at := ck.where[mem.Param]
			saved := at.offset + from - mem.Offset // in the saved bucket
			savedLen := ck.manifest.Buckets[at.bucket].Padded / ck.manifest.Replicas
			q, within := saved/savedLen, saved%savedLen
			run := min(to-from, savedLen-within)
			t, ok := ck.shards[q][fmt.Sprintf(key, at.bucket)]
			if !ok || t.DType != want || len(t.Data) != savedLen*size {
				return nil, fmt.Errorf("shard %d holds no %s %s[%d]", q, fmt.Sprintf(key, at.bucket), want, savedLen)
			}
			copy(out[(from-lo)*size:], t.Data[within*size:(within+run)*size])
			from += run
		}
	}
	return out, nil
}

// stageRNG uploads replica's saved random state to rng's device (nil
// without rng, or when the checkpoint was saved at another replica count:
// no resume there is bit for bit, and each replica keeps its own
// seeding).
func (ck *shardedCheckpoint) stageRNG(rng *xla.Device, replica, replicas int) (*xla.Tensor, error) {
	if rng == nil || ck.manifest.Replicas != replicas {
		return nil, nil
	}
	like := rng.RNGState()
	t, ok := ck.shards[replica][rngName]
	if !ok {
		return nil, fmt.Errorf("shard %d holds no random state (saved without Checkpoint.RNG): load it without RNG", replica)
	}
	if want := nn.SafetensorsDType(like.DType()); t.DType != want || !slices.Equal(t.Shape, like.Dims()) {
		return nil, fmt.Errorf("shard %d's %s is %s%v, not %s%v", replica, rngName, t.DType, t.Shape, want, like.Dims())
	}
	staged, err := xla.FromBytes(rng, like.DType(), like.Dims(), t.Data)
	if err != nil {
		return nil, fmt.Errorf("uploading the random state: %w", err)
	}
	return staged, nil
}
