package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/procfs"
)

func f32s(data []byte) []float32 {
	out := make([]float32, len(data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out
}

// TestReadsTorchFile decodes a file written by torch's
// safetensors.torch.save_file (testdata/gen_torch_fixture.py).
func TestReadsTorchFile(t *testing.T) {
	f, err := ReadFile("testdata/torch_mixed.safetensors")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"format": "pt", "step": "42"}, f.Metadata)
	require.Len(t, f.Tensors, 7)

	w, ok := f.Lookup("weight")
	require.True(t, ok)
	assert.Equal(t, "F32", w.DType)
	assert.Equal(t, []int{3, 4}, w.Shape)
	want := make([]float32, 12)
	for i := range want {
		want[i] = float32(i)/4 - 1
	}
	assert.Equal(t, want, f32s(w.Data))

	half, _ := f.Lookup("half")
	assert.Equal(t, "F16", half.DType)
	assert.Equal(t, []byte{0x00, 0x38, 0x00, 0xc0, 0xff, 0x7b}, half.Data, "0.5, -2, 65504 in IEEE half")
	bf, _ := f.Lookup("bf16")
	assert.Equal(t, []byte{0x80, 0x3f, 0x80, 0xbe, 0x40, 0x40, 0x80, 0x44}, bf.Data, "1, -0.25, 3, 1024 in bfloat16")
	steps, _ := f.Lookup("steps")
	assert.Equal(t, "I64", steps.DType)
	assert.Equal(t, []int64{7, -1, 1 << 40}, []int64{
		int64(binary.LittleEndian.Uint64(steps.Data)), int64(binary.LittleEndian.Uint64(steps.Data[8:])),
		int64(binary.LittleEndian.Uint64(steps.Data[16:]))})
	mask, _ := f.Lookup("mask")
	assert.Equal(t, []byte{1, 0, 1}, mask.Data)
	scalar, _ := f.Lookup("scalar")
	assert.Equal(t, []int{}, scalar.Shape)
	assert.Equal(t, 2.5, math.Float64frombits(binary.LittleEndian.Uint64(scalar.Data)))
	empty, _ := f.Lookup("empty")
	assert.Equal(t, []int{0, 3}, empty.Shape)
	assert.Empty(t, empty.Data)
}

func TestRoundTripAndAtomicWrite(t *testing.T) {
	src, err := ReadFile("testdata/torch_mixed.safetensors")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "copy.safetensors")
	require.NoError(t, WriteFile(path, src))
	back, err := ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, src.Metadata, back.Metadata)
	for _, want := range src.Tensors {
		got, ok := back.Lookup(want.Name)
		require.True(t, ok, want.Name)
		assert.Equal(t, want.DType, got.DType, want.Name)
		assert.Equal(t, want.Shape, got.Shape, want.Name)
		assert.Equal(t, want.Data, got.Data, want.Name)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, procfs.CreateMode("/proc"), info.Mode().Perm(), "the mode os.Create gives (umask), not os.CreateTemp's 0600")
}

func TestRejectsBadFiles(t *testing.T) {
	good, err := os.ReadFile("testdata/torch_mixed.safetensors")
	require.NoError(t, err)
	headerLen := int(binary.LittleEndian.Uint64(good))
	withHeader := func(h string, body []byte) []byte {
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(out, h...), body...)
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"too short", good[:5], "truncated: 5 bytes"},
		{"truncated header", good[:100], "truncated: header says 464 bytes but only 92 follow"},
		{"truncated data", good[:len(good)-4], "outside the"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "exceeds the 104857600-byte limit"},
		{"bad json", withHeader("{not json", nil), "header at offset 8 is not valid JSON"},
		{"unknown dtype", withHeader(`{"a":{"dtype":"F9","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `tensor "a": unknown dtype "F9"`},
		{"size mismatch", withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), `tensor "a": 4 data bytes for shape [2] of F32 (want 8)`},
		{"overlap", withHeader(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), "overlaps the previous tensor"},
		{"hole", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), "data bytes [0, 4) belong to no tensor"},
		{"trailing bytes", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 8)), "data bytes [4, 8) belong to no tensor"},
		{"bad metadata", withHeader(`{"__metadata__":{"step":3}}`, nil), "__metadata__ must map strings to strings"},
		// 2^32·2^32 elements wrap to 0 bytes in 64-bit arithmetic.
		{"element count overflows to 0 bytes", withHeader(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil),
			`tensor "a": shape [4294967296 4294967296] of F32 has more bytes than any file`},
		{"byte size overflows to the data length", withHeader(`{"a":{"dtype":"F64","shape":[2305843009213693952,1],"data_offsets":[0,0]}}`, nil),
			"has more bytes than any file"},
		{"torch zip (.pth)", []byte("PK\x03\x04\x00\x00\x08\x08archive/data.pkl"), "this is a PyTorch file (torch.save's .pth/.pt format), not safetensors; convert its state dict once with\n  python3 -c 'import sys, torch;"},
		{"legacy torch pickle", []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e}, "not safetensors; convert"},
		{"negative dimension", withHeader(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, nil), "negative dimension"},
	}
	require.Equal(t, 464, headerLen, "fixture header length")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("x.safetensors", tt.data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "safetensors: x.safetensors: ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err = Encode(File{Tensors: []Tensor{{Name: "a", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}}})
	assert.ErrorContains(t, err, `tensor "a": 4 bytes for shape [2] of F32 (want 8`)
	_, err = Encode(File{Tensors: []Tensor{{Name: "a", DType: "F32", Shape: []int{1 << 32, 1 << 32}}}})
	assert.ErrorContains(t, err, `the shape is invalid`)
	_, err = Decode("it's.pth", []byte("PK\x03\x04\x00\x00\x08\x08"))
	assert.ErrorContains(t, err, `sys.argv[2])' 'it'\''s.pth' 'it'\''s.safetensors'`+"\n(pip install torch safetensors) and pass it's.safetensors", "paths are shell-quoted")
	f, err := Decode("x.safetensors", withHeader(`{"e":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}`, nil))
	require.NoError(t, err, "a zero-size tensor with huge other dimensions is valid")
	assert.Equal(t, []int{0, 1 << 32, 1 << 32}, f.Tensors[0].Shape)
}

// FuzzDecode: no input may panic or hang the decoder.
func FuzzDecode(f *testing.F) {
	good, err := os.ReadFile("testdata/torch_mixed.safetensors")
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if file, err := Decode("fuzz", data); err == nil {
			_, err := Encode(file)
			require.NoError(t, err, "a decoded file re-encodes")
		}
	})
}
