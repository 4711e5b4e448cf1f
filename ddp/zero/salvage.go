package zero

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// one step: piece-<replica>-of-<replicas>.safetensors (buddy.go), and
// head.json, the step's manifest without its files, written by a
// survivor whose loop completed that step. AssembleSalvaged turns a
// complete one into a sharded checkpoint.
const headName = "head.json"

func pieceFileName(replica, replicas int) string {
	return fmt.Sprintf("piece-%05d-of-%05d.safetensors", replica, replicas)
}

// ErrNoBuddyCopies: the optimizer kept no buddy copies (one process, or
// KeepBuddyCopies was not called), so nothing of the lost shards is here.
var ErrNoBuddyCopies = errors.New("no buddy copies of the optimizer's shards were kept (KeepBuddyCopies)")

// SalvageShards writes, after a peer was lost, what this process holds
// of the steps it kept (its replicas' pieces and its ward's) into the
// salvage directory dirOf names for each step, and the manifest head of
// each checkpoint in heads (the loop's last completed step, and the one
// before) whose step it holds. It needs no collective: every survivor
// writes what it holds, each file atomically (two survivors holding the
// same piece write the same bytes). It returns the steps it wrote a head
// for. Every local replica calls it at the same point.
func (z *ZeroRedundancyOptimizer) SalvageShards(ctx context.Context, dirOf func(step int) string, heads []optim.Checkpoint) ([]int, error) {
	if !z.buddies || len(z.held) == 0 {
		return nil, ErrNoBuddyCopies
	}
	return exchange.HostOnce(ctx, z.dev, exchange.Timeout(z.pg), "writing the salvaged shards", func() ([]int, error) {
		var headed []int
		for _, h := range z.held {
			dir := dirOf(h.step)
			if err := z.writeHeld(dir, h); err != nil {
				return nil, fmt.Errorf("zero: rank %d writing step %d's shards to %s: %w", z.pg.Rank(), h.step, dir, err)
			}
			for _, c := range heads {
				if c.Step != h.step {
					continue
				}
				if err := z.writeHead(dir, c); err != nil {
					return nil, fmt.Errorf("zero: rank %d writing step %d's head to %s: %w", z.pg.Rank(), h.step, dir, err)
				}
				headed = append(headed, h.step)
			}
			if err := safetensors.SyncDir(dir); err != nil {
				return nil, err
			}
		}
		if len(headed) == 0 {
			return nil, fmt.Errorf("zero: the optimizer kept steps %v, and the loop completed %v: they do not meet (one Step a loop step?)",
				heldSteps(z.held), checkpointSteps(heads))
		}
		return headed, nil
	})
}

// writeHeld writes h's pieces, this process's and its ward's.
func (z *ZeroRedundancyOptimizer) writeHeld(dir string, h heldStep) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for from, pieces := range map[int][][]byte{z.pg.Rank(): h.own, h.wardRank: h.ward} {
		for i, p := range pieces {
			if err := safetensors.WriteAtomic(filepath.Join(dir, pieceFileName(from*z.local+i, z.replicas)), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// salvageHead is a salvaged step's manifest without its files, and the
// name each parameter has in the model's state dict.
type salvageHead struct {
	Manifest   zeroManifest `json:"manifest"`
	ModelNames []string     `json:"model_names"`
}

// writeHead writes c's head.
func (z *ZeroRedundancyOptimizer) writeHead(dir string, c optim.Checkpoint) error {
	data, err := json.MarshalIndent(salvageHead{Manifest: z.manifestOf(salvagedID(c.Step), c), ModelNames: z.stateNames()}, "", " ")
	if err != nil {
		return err
	}
	return safetensors.WriteAtomic(filepath.Join(dir, headName), data)
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

func heldSteps(held []heldStep) []int {
	var out []int
	for _, h := range held {
		out = append(out, h.step)
	}
	return out
}

func checkpointSteps(cs []optim.Checkpoint) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.Step)
	}
	return out
}

// AssembleSalvaged makes the sharded checkpoint of step in the new
// directory to from the salvage directory from, when that holds its head
// and every replica's piece: the shards, the model (its parameters joined
// from the updated shards, the rest from replica 0's piece), the manifest
// with every file's hash, LATEST. It needs no device: rank 0 runs it as a
// job resumes. A piece missing (its replica and its buddy both lost), or
// one that is not what the head says, is an error naming it.
func (z *ZeroRedundancyOptimizer) AssembleSalvaged(from, to string, step int) error {
	head, pieces, err := readSalvaged(from, step)
	if err != nil {
		return err
	}
	m := head.Manifest
	version := filepath.Join(to, m.ID)
	if err := os.MkdirAll(version, 0o755); err != nil {
		return err
	}
	for r, p := range pieces {
		shard := safetensors.File{Metadata: map[string]string{"format": zeroFormat, "id": m.ID, "replica": strconv.Itoa(r), "replicas": strconv.Itoa(m.Replicas)}}
		for _, t := range p.Tensors {
			if _, isParam := bucketParam(t.Name); !isParam && !isModuleRest(t.Name) {
				shard.Tensors = append(shard.Tensors, t)
			}
		}
		f, err := writeVerified(filepath.Join(version, shardFileName(r, m.Replicas)), shard)
		if err != nil {
			return err
		}
		m.Shards = append(m.Shards, f)
	}
	model, err := salvagedModel(head, pieces)
	if err != nil {
		return err
	}
	if m.Model, err = writeVerified(filepath.Join(version, modelName), model); err != nil {
		return err
	}
	if m.LR, err = strconv.ParseFloat(pieces[0].Metadata["lr"], 64); err != nil || !(m.LR >= 0) {
		return fmt.Errorf("%s: piece 0's learning rate is %q", from, pieces[0].Metadata["lr"])
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

// readSalvaged reads from's head (of step) and every replica's piece,
// checking each piece's format, place and step.
func readSalvaged(from string, step int) (salvageHead, []safetensors.File, error) {
	var head salvageHead
	data, err := readRegular(filepath.Join(from, headName), manifestMaxBytes)
	if err != nil {
		return head, nil, fmt.Errorf("no survivor completed step %d (its head: %w)", step, err)
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return head, nil, fmt.Errorf("%s: not valid JSON: %w", filepath.Join(from, headName), err)
	}
	m := head.Manifest
	ck := shardedCheckpoint{manifest: m}
	ck.manifest.Shards = make([]manifestFile, max(0, m.Replicas))
	if err := ck.checkManifest(salvagedID(step)); err != nil || m.Step != step || len(head.ModelNames) != len(m.Params) {
		return head, nil, fmt.Errorf("%s does not hold together (step %d, want %d; %d model names for %d parameters): %v",
			filepath.Join(from, headName), m.Step, step, len(head.ModelNames), len(m.Params), err)
	}
	limit := pieceLimit(m)
	pieces := make([]safetensors.File, m.Replicas)
	for r := range pieces {
		path := filepath.Join(from, pieceFileName(r, m.Replicas))
		data, err := readRegular(path, limit)
		if err != nil {
			return head, nil, fmt.Errorf("replica %d's shard of step %d is not among the survivors' (it and its buddy lost?): %w", r, step, err)
		}
		if pieces[r], err = safetensors.Decode(path, data); err != nil {
			return head, nil, err
		}
		meta := pieces[r].Metadata
		if meta["format"] != pieceFormat || meta["replica"] != strconv.Itoa(r) || meta["replicas"] != strconv.Itoa(m.Replicas) || meta["step"] != strconv.Itoa(step) {
			return head, nil, fmt.Errorf("%s is not replica %d's piece of step %d of %d replicas (it says %s %s of %s, step %s)",
				path, r, step, m.Replicas, meta["format"], meta["replica"], meta["replicas"], meta["step"])
		}
	}
	return head, pieces, nil
}

// pieceLimit bounds one piece of m: at most ten 8-byte values an element
// of each bucket's shard (the state, the master, the parameters), and
// room for the module's other state and the header.
func pieceLimit(m zeroManifest) int64 {
	limit := int64(256 << 20)
	for _, b := range m.Buckets {
		limit += 80 * int64(b.Padded/m.Replicas)
	}
	return limit
}

// bucketParam reads a piece's updated-parameters name ("param.3").
func bucketParam(name string) (int, bool) {
	var b int
	if _, err := fmt.Sscanf(name, paramKey, &b); err != nil || fmt.Sprintf(paramKey, b) != name {
		return 0, false
	}
	return b, true
}

func isModuleRest(name string) bool {
	return len(name) > len(modulePrefix) && name[:len(modulePrefix)] == modulePrefix
}

// salvagedModel is the module's state dict at m's step: each parameter
// from its bucket's updated shards (the masters, or the parameters' own
// block where their dtype differs), the rest from replica 0's piece.
func salvagedModel(head salvageHead, pieces []safetensors.File) (safetensors.File, error) {
	var out safetensors.File
	m := head.Manifest
	ck := shardedCheckpoint{manifest: m}
	for _, p := range pieces {
		byName := make(map[string]safetensors.Tensor, len(p.Tensors))
		for _, t := range p.Tensors {
			byName[t.Name] = t
		}
		ck.shards = append(ck.shards, byName)
	}
	for b, bucket := range m.Buckets {
		key := "master.%d"
		if _, ok := ck.shards[0][fmt.Sprintf(paramKey, b)]; ok {
			key = paramKey
		}
		full, dtype, err := ck.wholeBucket(key, b)
		if err != nil {
			return out, err
		}
		size := len(full) / bucket.Padded
		for _, mem := range bucket.Members {
			p := m.Params[mem.Param]
			n, _ := elements(p.Dims)
			out.Tensors = append(out.Tensors, safetensors.Tensor{Name: head.ModelNames[mem.Param], DType: dtype, Shape: slices.Clone(p.Dims),
				Data: full[mem.Offset*size : (mem.Offset+n)*size]})
		}
	}
	for _, t := range pieces[0].Tensors {
		if isModuleRest(t.Name) {
			t.Name = t.Name[len(modulePrefix):]
			out.Tensors = append(out.Tensors, t)
		}
	}
	return out, nil
}
