package nn

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// safetensorsDTypes maps xla dtypes to safetensors dtype names.
var safetensorsDTypes = map[xla.DType]string{
	xla.Float32: "F32", xla.Float64: "F64", xla.BFloat16: "BF16", xla.Int32: "I32",
	xla.Int64: "I64", xla.Bool: "BOOL", xla.Uint64: "U64",
}

// SafetensorsDType is d's name in a safetensors file ("F32", "BF16", ...),
// or "" for a dtype the files here do not hold.
func SafetensorsDType(d xla.DType) string { return safetensorsDTypes[d] }

// EncodeTensors copies named tensors to the host as safetensors tensors
// (running a MarkStep if any is pending).
func EncodeTensors(ctx context.Context, named []Named) ([]safetensors.Tensor, error) {
	out := make([]safetensors.Tensor, len(named))
	for i, n := range named {
		dtype, ok := safetensorsDTypes[n.Tensor.DType()]
		if !ok {
			return nil, fmt.Errorf("nn: %s: dtype %s has no safetensors name", n.Name, n.Tensor.DType())
		}
		data, err := n.Tensor.Bytes(ctx)
		if err != nil {
			return nil, fmt.Errorf("nn: reading %s: %w", n.Name, err)
		}
		out[i] = safetensors.Tensor{Name: n.Name, DType: dtype, Shape: slices.Clone(n.Tensor.Dims()), Data: data}
	}
	return out, nil
}

// SnapshotTensors takes the named tensors' values as they are now
// (running a MarkStep if any is pending) without copying them: each
// Source reads, whenever it is written, the value its tensor has now,
// although later steps go on updating the tensor (they stop updating
// those buffers in place, so the device holds the snapshot until it is
// dropped). The sources may be read on another goroutine while training
// goes on, as an asynchronous checkpoint does.
func SnapshotTensors(ctx context.Context, named []Named) ([]safetensors.Source, error) {
	out := make([]safetensors.Source, len(named))
	for i, n := range named {
		dtype, ok := safetensorsDTypes[n.Tensor.DType()]
		if !ok {
			return nil, fmt.Errorf("nn: %s: dtype %s has no safetensors name", n.Name, n.Tensor.DType())
		}
		snap, err := n.Tensor.To(ctx, n.Tensor.Device())
		if err != nil {
			return nil, fmt.Errorf("nn: taking %s: %w", n.Name, err)
		}
		out[i] = safetensors.Source{
			Layout: safetensors.Layout{Name: n.Name, DType: dtype, Shape: slices.Clone(n.Tensor.Dims())},
			// snap holds a buffer already computed, so reading it runs no
			// MarkStep and needs no caller's context.
			Read: func(dst []byte) error { return snap.CopyBytesTo(context.Background(), dst) },
		}
	}
	return out, nil
}

// CheckTensors reports, in one error, every tensor of named missing from
// file (stored under prefix+name), every tensor under prefix in file that
// named lacks, and every tensor whose dtype or shape differ.
func CheckTensors(named []Named, file safetensors.File, prefix, source string) error {
	_, err := matchTensors(named, file, prefix, source)
	return err
}

// AssignTensors loads every tensor of named from file, where it is stored
// under prefix+name, after CheckTensors' checks. All or nothing: on a
// mismatch or a failed upload nothing is assigned.
func AssignTensors(named []Named, file safetensors.File, prefix, source string) error {
	staged, err := StageTensors(named, file, prefix, source)
	if err != nil {
		return err
	}
	staged.Commit()
	return nil
}

// Staged tensors are uploaded from a file and wait to be assigned, so a
// caller loading several parts (a checkpoint's model and optimizer) can
// validate and upload everything before it changes anything.
type Staged struct {
	named  []Named
	loaded []*xla.Tensor
}

// StageTensors checks named against file (as CheckTensors) and uploads
// every tensor, changing nothing yet.
func StageTensors(named []Named, file safetensors.File, prefix, source string) (*Staged, error) {
	byName, err := matchTensors(named, file, prefix, source)
	if err != nil {
		return nil, err
	}
	s := &Staged{named: named, loaded: make([]*xla.Tensor, len(named))}
	for i, n := range named {
		t := byName[n.Name]
		if s.loaded[i], err = xla.FromBytes(n.Tensor.Device(), n.Tensor.DType(), t.Shape, t.Data); err != nil {
			return nil, fmt.Errorf("nn: loading %s from %s: %w", n.Name, source, err)
		}
	}
	return s, nil
}

// Commit assigns the staged values. It cannot fail: devices, dtypes and
// shapes were checked when staging.
func (s *Staged) Commit() {
	for i, n := range s.named {
		if err := n.Tensor.Assign(s.loaded[i]); err != nil {
			panic(fmt.Sprintf("nn: assigning staged %s: %v", n.Name, err)) // a checked shape changed: a bug
		}
	}
}

func matchTensors(named []Named, file safetensors.File, prefix, source string) (map[string]safetensors.Tensor, error) {
	byName := map[string]safetensors.Tensor{}
	for _, t := range file.Tensors {
		if strings.HasPrefix(t.Name, prefix) {
			byName[strings.TrimPrefix(t.Name, prefix)] = t
		}
	}
	var missing, mismatched []string
	expected := map[string]bool{}
	for _, n := range named {
		expected[n.Name] = true
		t, ok := byName[n.Name]
		if !ok {
			missing = append(missing, n.Name)
			continue
		}
		want := safetensorsDTypes[n.Tensor.DType()]
		if t.DType != want || !slices.Equal(t.Shape, n.Tensor.Dims()) {
			mismatched = append(mismatched, fmt.Sprintf("%s (file %s%v, model %s%v)", n.Name, t.DType, t.Shape, want, n.Tensor.Dims()))
		}
	}
	var unexpected []string
	for name := range byName {
		if !expected[name] {
			unexpected = append(unexpected, name)
		}
	}
	slices.Sort(unexpected)
	if len(missing)+len(unexpected)+len(mismatched) > 0 {
		var parts []string
		for _, p := range []struct {
			what  string
			names []string
		}{{"missing", missing}, {"unexpected", unexpected}, {"mis-shaped", mismatched}} {
			if len(p.names) > 0 {
				parts = append(parts, fmt.Sprintf("%s: %s", p.what, strings.Join(p.names, ", ")))
			}
		}
		return nil, fmt.Errorf("nn: %s does not match: %s", source, strings.Join(parts, "; "))
	}
	return byName, nil
}

// SaveStateDict writes m's state dict to path as safetensors, atomically,
// with torch's names, so torch's safetensors.torch.load_file reads it.
func SaveStateDict(ctx context.Context, path string, m Module, metadata map[string]string) error {
	tensors, err := EncodeTensors(ctx, StateDict(m))
	if err != nil {
		return err
	}
	return safetensors.WriteFile(path, safetensors.File{Metadata: metadata, Tensors: tensors})
}

// LoadStateDict loads a safetensors state dict (ours, or torch's
// safetensors.torch.save_file output) into m and returns its metadata.
func LoadStateDict(path string, m Module) (map[string]string, error) {
	file, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := AssignTensors(StateDict(m), file, "", path); err != nil {
		return nil, err
	}
	return file.Metadata, nil
}
