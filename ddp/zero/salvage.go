package zero

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// A salvage directory holds what the survivors of a lost peer held of
// one step: piece-<replica>-of-<replicas>.safetensors (buddy.go), and,
// from each survivor whose loop completed that step, head-<rank>.json
// (the step's manifest without its files, and each parameter's name in
// the model's state dict) and model-<rank>.safetensors (its model's state
// dict at that step). AssembleSalvaged turns a whole one into a sharded
// checkpoint, with the lowest rank's model, as a checkpoint holds global
// replica 0's (replicas may differ in their buffers).
func headFileName(rank int) string  { return fmt.Sprintf("head-%05d.json", rank) }
func modelFileName(rank int) string { return fmt.Sprintf("model-%05d.safetensors", rank) }

func pieceFileName(replica, replicas int) string {
	return fmt.Sprintf("piece-%05d-of-%05d.safetensors", replica, replicas)
}

// ErrNoBuddyCopies: the optimizer kept no buddy copies (one process, or
// KeepBuddyCopies was not called, or no Step ran since the resume), so
// nothing of the lost shards is here.
var ErrNoBuddyCopies = errors.New("no buddy copies of the optimizer's shards were kept (KeepBuddyCopies)")

// SalvageShards writes, after a peer was lost, what this process holds
// of the steps it kept (its replicas' pieces, and its ward's) into the
// salvage directory dirOf names for each, and c's head and model into
// c's step's. c is the last step this replica completed: its model holds
// that step's parameters. It needs no collective: every survivor writes
// what it holds, each file atomically (two survivors holding one piece
// write the same bytes). Every local replica calls it at the same point.
func (z *ZeroRedundancyOptimizer) SalvageShards(ctx context.Context, dirOf func(step int) string, c optim.Checkpoint) error {
	held := z.heldSteps()
	if len(held) == 0 {
		return ErrNoBuddyCopies
	}
	if held[len(held)-1].step < c.Step || held[0].step > c.Step {
		return fmt.Errorf("zero: the optimizer kept steps %d to %d, and the loop completed step %d: they do not meet (one Step a loop step?)",
			held[0].step, held[len(held)-1].step, c.Step)
	}
	model, err := z.modelAt(ctx, c)
	if err != nil {
		return fmt.Errorf("zero: the model of step %d: %w", c.Step, err)
	}
	_, err = exchange.HostOnce(ctx, z.dev, exchange.Timeout(z.pg), "writing the salvaged shards", func() (struct{}, error) {
		for _, h := range held {
			dir, sums := dirOf(h.step), fileSums{}
			if err := z.writeHeld(dir, h, sums); err != nil {
				return struct{}{}, fmt.Errorf("zero: rank %d writing step %d's shards to %s: %w", z.pg.Rank(), h.step, dir, err)
			}
			if h.step == c.Step {
				if err := z.writeHead(dir, c, model, sums); err != nil {
					return struct{}{}, fmt.Errorf("zero: rank %d writing step %d's head to %s: %w", z.pg.Rank(), h.step, dir, err)
				}
			}
			if err := sums.write(dir, z.pg.Rank()); err != nil {
				return struct{}{}, err
			}
			if err := safetensors.SyncDir(dir); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// modelAt is c's model as of its step: the parameters as they stand
// (the step's, gathered), the rest as it stood at that step's update.
func (z *ZeroRedundancyOptimizer) modelAt(ctx context.Context, c optim.Checkpoint) ([]safetensors.Tensor, error) {
	kept := map[string]safetensors.Tensor{}
	for _, r := range z.rest {
		if r.step == c.Step {
			for _, t := range r.tensors {
				kept[t.Name] = t
			}
		}
	}
	state := nn.StateDict(c.Model)
	out, err := nn.EncodeTensors(ctx, slices.DeleteFunc(slices.Clone(state), func(n nn.Named) bool { _, ok := kept[n.Name]; return ok }))
	if err != nil {
		return nil, err
	}
	for _, n := range state {
		if t, ok := kept[n.Name]; ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// heldSteps is what this process holds, oldest first (a step whose
// exchange failed holds its own pieces in the slot that was next).
func (z *ZeroRedundancyOptimizer) heldSteps() []heldStep {
	if !z.buddies || z.slots == nil {
		return nil
	}
	var out []heldStep
	for _, h := range z.slots.slots {
		if h.ownValid {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b heldStep) int { return a.step - b.step })
	return out
}

// writeHeld writes h's pieces, this process's and, when they all
// arrived, its ward's, and vouches for each in sums.
func (z *ZeroRedundancyOptimizer) writeHeld(dir string, h heldStep, sums fileSums) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(rank int, blob []byte) error {
		for i := range z.local {
			piece, name := blob[i*z.slots.stride:][:z.slots.size], pieceFileName(rank*z.local+i, z.replicas)
			if err := safetensors.WriteAtomic(filepath.Join(dir, name), piece); err != nil {
				return err
			}
			sums.add(name, piece)
		}
		return nil
	}
	if err := write(z.pg.Rank(), h.own); err != nil || !h.wardValid {
		return err
	}
	return write(h.wardRank, h.ward)
}

// salvageHead is a salvaged step's manifest without its files, and each
// parameter's name in the model's state dict.
type salvageHead struct {
	Manifest   zeroManifest `json:"manifest"`
	ModelNames []string     `json:"model_names"`
}

// writeHead writes c's model, then its head, and vouches for the model
// in sums.
func (z *ZeroRedundancyOptimizer) writeHead(dir string, c optim.Checkpoint, model []safetensors.Tensor, sums fileSums) error {
	f, err := writeVerified(filepath.Join(dir, modelFileName(z.pg.Rank())), safetensors.File{Tensors: model})
	if err != nil {
		return err
	}
	sums[f.Name] = f.SHA256
	data, err := json.MarshalIndent(salvageHead{Manifest: z.manifestOf(salvagedID(c.Step), c), ModelNames: z.stateNames()}, "", " ")
	if err != nil {
		return err
	}
	return safetensors.WriteAtomic(filepath.Join(dir, headFileName(z.pg.Rank())), data)
}

// stateNames is each sharded parameter's name in the module's state
// dict (under "module." with ddp.TorchStateDictNames).
func (z *ZeroRedundancyOptimizer) stateNames() []string {
	byTensor := map[*xla.Tensor]string{}
	for _, s := range nn.StateDict(z.module) {
		byTensor[s.Tensor] = s.Name
	}
	out := make([]string, len(z.params))
	for i, p := range z.params {
		out[i] = cmp.Or(byTensor[p.Tensor], p.Name)
	}
	return out
}

func salvagedID(step int) string { return fmt.Sprintf("step-%d-salvaged", step) }

// AssembleSalvaged makes the sharded checkpoint of step in the new
// directory to from the salvage directory from, when that holds the
// step's head and model and every replica's piece: each shard (its
// piece, with its float32 masters cut from the model's parameters), the
// model, the manifest with every file's hash, LATEST. It needs no device:
// rank 0 runs it as a job resumes. A piece missing (its replica and its
// buddy both lost), or one that is not what the head says, is an error
// naming it; a directory no survivor's loop ended at (no head) is one
// that is fs.ErrNotExist.
func (z *ZeroRedundancyOptimizer) AssembleSalvaged(from, to string, step int) error {
	head, model, pieces, err := readSalvaged(from, step)
	if err != nil {
		return err
	}
	m := head.Manifest
	m.LR = pieceLR(pieces[0])
	version := filepath.Join(to, m.ID)
	if err := os.MkdirAll(version, 0o755); err != nil {
		return err
	}
	masters, err := modelMasters(head, model, pieces[0])
	if err != nil {
		return err
	}
	for r, p := range pieces {
		shard := safetensors.File{Metadata: map[string]string{"format": zeroFormat, "id": m.ID, "replica": strconv.Itoa(r), "replicas": strconv.Itoa(m.Replicas)}}
		for _, t := range p.Tensors {
			if t.Name != pieceMeta {
				shard.Tensors = append(shard.Tensors, t)
			}
		}
		for b := range m.Buckets {
			if run, ok := masters[b]; ok {
				part := len(run.Data) / m.Replicas
				run.Data = run.Data[r*part : (r+1)*part]
				shard.Tensors = append(shard.Tensors, run)
			}
		}
		f, err := writeVerified(filepath.Join(version, shardFileName(r, m.Replicas)), shard)
		if err != nil {
			return err
		}
		m.Shards = append(m.Shards, f)
	}
	if m.Model, err = writeVerified(filepath.Join(version, modelName), model); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := safetensors.WriteAtomic(filepath.Join(version, manifestName), data); err != nil {
		return err
	}
	return safetensors.WriteAtomic(filepath.Join(to, latestName), []byte(m.ID+"\n"))
}

// readSalvaged reads from's head (of step) and model, the lowest rank's,
// and every replica's piece, checking each piece's format, place and
// step.
func readSalvaged(from string, step int) (salvageHead, safetensors.File, []safetensors.File, error) {
	var head salvageHead
	var model safetensors.File
	rank, err := lowestHead(from)
	if err != nil {
		return head, model, nil, fmt.Errorf("no survivor's loop ended at step %d: %w", step, err)
	}
	path := filepath.Join(from, headFileName(rank))
	data, err := readRegular(path, manifestMaxBytes)
	if err != nil {
		return head, model, nil, fmt.Errorf("step %d's head: %w", step, err)
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return head, model, nil, fmt.Errorf("%s: not valid JSON: %w", path, err)
	}
	m := head.Manifest
	ck := shardedCheckpoint{manifest: m}
	ck.manifest.Shards = make([]manifestFile, max(0, min(m.Replicas, 1<<20)))
	if err := ck.checkManifest(salvagedID(step)); err != nil || m.Step != step || len(head.ModelNames) != len(m.Params) {
		return head, model, nil, fmt.Errorf("%s does not hold together (step %d, want %d; %d model names for %d parameters): %v",
			path, m.Step, step, len(head.ModelNames), len(m.Params), err)
	}
	vouched, err := readVouched(from)
	if err != nil {
		return head, model, nil, err
	}
	limit := pieceLimit(m)
	path = filepath.Join(from, modelFileName(rank))
	if data, err = readRegular(path, 4*limit*int64(m.Replicas)); err == nil {
		if err = checkVouched(vouched, modelFileName(rank), data); err == nil {
			model, err = safetensors.Decode(path, data)
		}
	}
	if err != nil {
		return head, model, nil, fmt.Errorf("step %d's model: %w", step, err)
	}
	pieces := make([]safetensors.File, m.Replicas)
	for r := range pieces {
		path := filepath.Join(from, pieceFileName(r, m.Replicas))
		data, err := readRegular(path, limit)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return head, model, nil, fmt.Errorf("replica %d's shard of step %d is not among the survivors' (it and its buddy lost?)", r, step)
		case err != nil:
			return head, model, nil, fmt.Errorf("replica %d's piece of step %d: %w", r, step, err)
		}
		if err := checkVouched(vouched, pieceFileName(r, m.Replicas), data); err != nil {
			return head, model, nil, fmt.Errorf("replica %d's piece of step %d: %w", r, step, err)
		}
		if pieces[r], err = safetensors.Decode(path, data); err != nil {
			return head, model, nil, err
		}
		if err := checkPiece(pieces[r], r, m.Replicas, step); err != nil {
			return head, model, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return head, model, pieces, nil
}

// lowestHead is the lowest rank whose head is in dir.
func lowestHead(dir string) (int, error) {
	names, _ := filepath.Glob(filepath.Join(dir, "head-*.json"))
	lowest := -1
	for _, n := range names {
		var rank int
		if _, err := fmt.Sscanf(filepath.Base(n), "head-%d.json", &rank); err == nil && rank >= 0 && headFileName(rank) == filepath.Base(n) &&
			(lowest < 0 || rank < lowest) {
			lowest = rank
		}
	}
	if lowest < 0 {
		// Not a step any survivor's loop ended at (they hold the step
		// before theirs too): the caller passes it by.
		return 0, fmt.Errorf("%s holds no head: %w", dir, fs.ErrNotExist)
	}
	return lowest, nil
}

// checkPiece checks that p is replica's piece of step in a job of
// replicas.
func checkPiece(p safetensors.File, replica, replicas, step int) error {
	t, ok := p.Lookup(pieceMeta)
	if p.Metadata["format"] != pieceFormat || !ok || t.DType != "F64" || len(t.Data) != 32 {
		return fmt.Errorf("not a piece of a salvaged step (format %q)", p.Metadata["format"])
	}
	var v [4]float64
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	if v[0] != float64(replica) || v[1] != float64(replicas) || v[2] != float64(step) || !(v[3] >= 0) {
		return fmt.Errorf("it says replica %g of %g at step %g (learning rate %g), not replica %d of %d at step %d",
			v[0], v[1], v[2], v[3], replica, replicas, step)
	}
	return nil
}

// pieceLR is a checked piece's learning rate.
func pieceLR(p safetensors.File) float64 {
	t, _ := p.Lookup(pieceMeta)
	return math.Float64frombits(binary.LittleEndian.Uint64(t.Data[24:]))
}

// pieceLimit bounds one piece of m: at most ten 8-byte values an element
// of each bucket's shard, and room for the header.
func pieceLimit(m zeroManifest) int64 {
	limit := int64(64 << 20)
	for _, b := range m.Buckets {
		limit += 80 * int64(b.Padded/m.Replicas)
	}
	return limit
}

// modelMasters is the whole run of masters, padded, of each bucket whose
// masters are its parameters' dtype, cut from the model's parameters (the
// pieces hold the others'): bucket index → the run's dtype and bytes.
func modelMasters(head salvageHead, model safetensors.File, piece safetensors.File) (map[int]safetensors.Tensor, error) {
	m := head.Manifest
	out := map[int]safetensors.Tensor{}
	for b, bucket := range m.Buckets {
		if _, inPiece := piece.Lookup(fmt.Sprintf("master.%d", b)); inPiece {
			continue
		}
		var run safetensors.Tensor
		for _, mem := range bucket.Members {
			name := head.ModelNames[mem.Param]
			n, _ := elements(m.Params[mem.Param].Dims)
			t, ok := model.Lookup(name)
			if !ok || n == 0 || len(t.Data)%n != 0 || (run.DType != "" && t.DType != run.DType) {
				return nil, fmt.Errorf("the model holds no %s %s of %d elements for bucket %d", name, cmp.Or(run.DType, "tensor"), n, b)
			}
			if run.DType == "" {
				run = safetensors.Tensor{Name: fmt.Sprintf("master.%d", b), DType: t.DType, Shape: []int{bucket.Padded / m.Replicas},
					Data: make([]byte, len(t.Data)/n*bucket.Padded)}
			}
			copy(run.Data[len(t.Data)/n*mem.Offset:], t.Data)
		}
		out[b] = run
	}
	return out, nil
}
