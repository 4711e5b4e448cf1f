package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sourcesOf streams f's tensors, counting the reads.
func sourcesOf(f File, reads *int) []Source {
	out := make([]Source, len(f.Tensors))
	for i, t := range f.Tensors {
		out[i] = Source{Layout: Layout{Name: t.Name, DType: t.DType, Shape: t.Shape}, Read: func(dst []byte) error {
			*reads++
			if len(dst) != len(t.Data) {
				return errors.New("wrong buffer size")
			}
			copy(dst, t.Data)
			return nil
		}}
	}
	return out
}

// TestStreamedFileEqualsEncoded: a streamed file (and EncodeSources' in
// memory) is the encoded file byte for byte, through one buffer reused from tensor to tensor and from file
// to file.
func TestStreamedFileEqualsEncoded(t *testing.T) {
	big := make([]byte, 4*1000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	files := map[string]File{
		"empty":    {},
		"metadata": {Metadata: map[string]string{"step": "7"}},
		"mixed": {Metadata: map[string]string{"step": "1"}, Tensors: []Tensor{
			{Name: "w", DType: "F32", Shape: []int{10, 100}, Data: big},
			{Name: "zero", DType: "F32", Shape: []int{0, 5}, Data: []byte{}},
			{Name: "scalar", DType: "BF16", Shape: []int{}, Data: []byte{1, 2}},
			{Name: "b", DType: "I64", Shape: []int{2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		}},
	}
	dir := t.TempDir()
	var s Streamer
	for name, f := range files {
		t.Run(name, func(t *testing.T) {
			want, err := Encode(f)
			require.NoError(t, err)
			path := filepath.Join(dir, name+".safetensors")
			reads := 0
			require.NoError(t, s.WriteFile(path, f.Metadata, sourcesOf(f, &reads)))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			assert.Equal(t, len(f.Tensors), reads, "each tensor read once")
			inMemory, err := EncodeSources(f.Metadata, sourcesOf(f, &reads))
			require.NoError(t, err)
			assert.Equal(t, want, inMemory, "EncodeSources: the same bytes in memory")
		})
	}
	assert.Equal(t, len(big), cap(s.buf), "one buffer, the largest tensor's size")
	allocs := testing.AllocsPerRun(3, func() {
		reads := 0
		require.NoError(t, s.WriteFile(filepath.Join(dir, "again.safetensors"), nil, sourcesOf(files["mixed"], &reads)))
	})
	assert.Less(t, allocs, float64(len(big))/8, "a warm streamer allocates no data buffer")
	s.Release()
	assert.Nil(t, s.buf)
}

// TestStreamerRefusesAndKeepsTheOldFile: a bad layout is refused before
// anything is written, and a read that fails halfway leaves the file that
// was there, and no temporary file.
func TestStreamerRefusesAndKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.safetensors")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	ok := func(dst []byte) error { return nil }
	f32 := func(name string, shape ...int) Source {
		return Source{Layout: Layout{Name: name, DType: "F32", Shape: shape}, Read: ok}
	}
	tests := []struct {
		name    string
		sources []Source
		want    string
	}{
		{"duplicate name", []Source{f32("a", 1), f32("a", 2)}, `tensor "a" given twice`},
		{"reserved name", []Source{f32("__metadata__", 1)}, "invalid tensor name"},
		{"empty name", []Source{f32("", 1)}, "invalid tensor name"},
		{"unknown dtype", []Source{{Layout: Layout{Name: "a", DType: "F31", Shape: []int{1}}, Read: ok}}, `unknown dtype "F31"`},
		{"negative dimension", []Source{f32("a", -1)}, "the shape is invalid"},
		{"size overflows", []Source{f32("a", 1<<32, 1<<32)}, "the shape is invalid"},
		{"read fails halfway", []Source{f32("a", 4), {Layout: Layout{Name: "b", DType: "F32", Shape: []int{4}}, Read: func([]byte) error {
			return errors.New("device gone")
		}}}, `reading tensor "b": device gone`},
	}
	var s Streamer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.WriteFile(path, nil, tt.sources)
			require.ErrorContains(t, err, tt.want)
			old, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, "old", string(old))
			left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
	require.ErrorContains(t, s.WriteFile(filepath.Join(dir, "no", "such", "dir.safetensors"), nil, nil), "no such file or directory")
}
