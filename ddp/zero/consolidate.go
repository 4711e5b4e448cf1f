package zero

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// ConsolidateCheckpoint writes the sharded checkpoint in dir as one
// training checkpoint file at path, the format checkpoint.Load and
// optim.ReadCheckpointFile read with the plain optimizer: the module's
// tensors as "model.<name>", the optimizer's as "optimizer.step" and
// "optimizer.state.<i>.<key>" shaped like parameter i, numbered as a
// plain optimizer over the same groups numbers them (group by group,
// each in the module's order; parameters with no elements left out),
// with step, epoch, lr and the optimizer's settings as metadata.
// safetensors.torch.load_file reads it. It needs no device and no job:
// run it anywhere the directory is. The state of bfloat16 parameters is
// float32 (their master weights are not exported).
func ConsolidateCheckpoint(dir, path string) error {
	ck, err := readShardedCheckpoint(dir)
	if err != nil {
		return fmt.Errorf("zero: ConsolidateCheckpoint: %w", err)
	}
	m := &ck.manifest
	out := safetensors.File{Metadata: map[string]string{}}
	for k, v := range m.Metadata {
		out.Metadata[k] = v
	}
	out.Metadata["step"] = strconv.Itoa(m.Step)
	out.Metadata["epoch"] = strconv.Itoa(m.Epoch)
	out.Metadata["lr"] = strconv.FormatFloat(m.LR, 'g', -1, 64)
	out.Metadata["optimizer"] = m.Hyperparameters
	for _, t := range ck.model.Tensors {
		t.Name = "model." + t.Name
		out.Tensors = append(out.Tensors, t)
	}
	// Per-bucket keys ("state.%d.exp_avg", ...) and whole tensors ("step").
	keys := map[string]bool{}
	var whole []string
	for name := range ck.shards[0] {
		if name == rngName {
			continue // the random states go as checkpoint.Save writes them, below
		}
		if _, key, ok := bucketKey(name); ok {
			if key != "master.%d" {
				keys[key] = true
			}
		} else {
			whole = append(whole, name)
		}
	}
	sort.Strings(whole)
	for _, name := range whole {
		t := ck.shards[0][name]
		t.Name = "optimizer." + name
		out.Tensors = append(out.Tensors, t)
	}
	sortedKeys := make([]string, 0, len(keys))
	for k := range keys {
		sortedKeys = append(sortedKeys, k)
	}
	sort.Strings(sortedKeys)
	for _, key := range sortedKeys {
		index := 0
		for b, bucket := range m.Buckets {
			full, dtype, err := ck.wholeBucket(key, b)
			if err != nil {
				return fmt.Errorf("zero: ConsolidateCheckpoint: %w", err)
			}
			size := len(full) / bucket.Padded
			for _, mem := range bucket.Members {
				p := m.Params[mem.Param]
				n, _ := elements(p.Dims)
				out.Tensors = append(out.Tensors, safetensors.Tensor{
					Name:  "optimizer." + fmt.Sprintf(key, index),
					DType: dtype, Shape: p.Dims,
					Data: full[mem.Offset*size : (mem.Offset+n)*size],
				})
				index++
			}
		}
	}
	rngs, err := ck.randomStates()
	if err != nil {
		return fmt.Errorf("zero: ConsolidateCheckpoint: %w", err)
	}
	out.Tensors = append(out.Tensors, rngs...)
	if err := safetensors.WriteFile(path, out); err != nil {
		return fmt.Errorf("zero: ConsolidateCheckpoint: %w", err)
	}
	return nil
}

// wholeBucket joins every replica's shard of key in saved bucket b.
func (ck *shardedCheckpoint) wholeBucket(key string, b int) ([]byte, string, error) {
	name := fmt.Sprintf(key, b)
	var full []byte
	dtype := ""
	for q, shard := range ck.shards {
		t, ok := shard[name]
		if !ok || (dtype != "" && t.DType != dtype) || len(t.Shape) != 1 || t.Shape[0] != ck.manifest.Buckets[b].Padded/ck.manifest.Replicas {
			return nil, "", fmt.Errorf("shard %d holds no %s of %d elements", q, name, ck.manifest.Buckets[b].Padded/ck.manifest.Replicas)
		}
		dtype = t.DType
		full = append(full, t.Data...)
	}
	return full, dtype, nil
}

// randomStates are the saved replicas' random states as checkpoint.Save
// writes them (none when saved without Checkpoint.RNG): replica 0's as
// "rng.device", and with several replicas every one's, a row each.
func (ck *shardedCheckpoint) randomStates() ([]safetensors.Tensor, error) {
	first, ok := ck.shards[0][rngName]
	if !ok {
		return nil, nil
	}
	out := []safetensors.Tensor{first}
	if len(ck.shards) == 1 {
		return out, nil
	}
	table := safetensors.Tensor{Name: checkpoint.ReplicaRNGName, DType: first.DType, Shape: append([]int{len(ck.shards)}, first.Shape...)}
	for q, shard := range ck.shards {
		t, ok := shard[rngName]
		if !ok || t.DType != first.DType || !slices.Equal(t.Shape, first.Shape) {
			return nil, fmt.Errorf("shard %d holds no %s %s%v as shard 0 does", q, rngName, first.DType, first.Shape)
		}
		table.Data = append(table.Data, t.Data...)
	}
	return append(out, table), nil
}
