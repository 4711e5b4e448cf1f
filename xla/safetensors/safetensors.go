package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/xladdp/xladdp/internal/procfs"
)

// MaxHeaderSize bounds the JSON header, as the reference implementation does.
const MaxHeaderSize = 100 << 20

// dtypeSizes are the element sizes of the dtypes safetensors names.
var dtypeSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// Tensor is one named tensor: dtype name ("F32", "BF16", "I64", ...), shape
// and raw little-endian data.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// File is a whole safetensors file; Tensors are in data order.
type File struct {
	Metadata map[string]string
	Tensors  []Tensor
}

// Lookup returns the tensor named name.
func (f *File) Lookup(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

type headerEntry struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// byteSize is the data size of shape in elements of size bytes; ok is
// false for a negative dimension or a size that overflows int, so a
// hostile shape whose product wraps to the data length is refused.
func byteSize(shape []int, size int) (n int, ok bool) {
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
	}
	if slices.Contains(shape, 0) {
		return 0, true
	}
	n = size
	for _, d := range shape {
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		n = int(lo)
	}
	return n, true
}

// Encode serializes f. Tensors keep their order; the header is padded with
// spaces to a multiple of 8 bytes, as the reference writer does.
func Encode(f File) ([]byte, error) {
	layout := make([]Layout, len(f.Tensors))
	for i, t := range f.Tensors {
		layout[i] = Layout{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	sizes, err := dataSizes(layout)
	if err != nil {
		return nil, err
	}
	offset := 0
	for i, t := range f.Tensors {
		if sizes[i] != len(t.Data) {
			return nil, fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s (want %d)",
				t.Name, len(t.Data), t.Shape, t.DType, sizes[i])
		}
		offset += sizes[i]
	}
	head, err := encodeHeader(f.Metadata, layout, sizes)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+offset)
	out = append(out, head...)
	for _, t := range f.Tensors {
		out = append(out, t.Data...)
	}
	return out, nil
}

// LayOut is where a file of meta and tensors laid out as layout puts
// each tensor's data: its header (the file's first bytes), each tensor's
// data offset in the file, and the file's size. A writer that fills a
// buffer of that size in place, header first, writes the file Encode
// would.
func LayOut(meta map[string]string, layout []Layout) (header []byte, offsets []int, size int, err error) {
	sizes, err := dataSizes(layout)
	if err != nil {
		return nil, nil, 0, err
	}
	if header, err = encodeHeader(meta, layout, sizes); err != nil {
		return nil, nil, 0, err
	}
	size = len(header)
	offsets = make([]int, len(sizes))
	for i, n := range sizes {
		offsets[i] = size
		size += n
	}
	return header, offsets, size, nil
}

// Layout is a tensor without its data: what a file's header says of it.
type Layout struct {
	Name  string
	DType string
	Shape []int
}

// dataSizes checks the tensors' names, dtypes and shapes and returns the
// size of each one's data.
func dataSizes(layout []Layout) ([]int, error) {
	sizes := make([]int, len(layout))
	seen := map[string]bool{}
	for i, t := range layout {
		size, ok := dtypeSizes[t.DType]
		switch {
		case t.Name == "" || t.Name == "__metadata__":
			return nil, fmt.Errorf("safetensors: invalid tensor name %q", t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("safetensors: tensor %q given twice", t.Name)
		case !ok:
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if sizes[i], ok = byteSize(t.Shape, size); !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: the shape is invalid: %v of %s has a negative dimension or more bytes than any file", t.Name, t.Shape, t.DType)
		}
		seen[t.Name] = true
	}
	return sizes, nil
}

// encodeHeader returns the file's first bytes: the header's length and
// the JSON header describing tensors of the given data sizes, in order.
func encodeHeader(meta map[string]string, layout []Layout, sizes []int) ([]byte, error) {
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	offset := 0
	for i, t := range layout {
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int{offset, offset + sizes[i]}}
		offset += sizes[i]
	}
	js, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, bytes.Repeat([]byte(" "), pad)...)
	}
	out := make([]byte, 8, 8+len(js))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	return append(out, js...), nil
}

// Decode parses and validates a safetensors file held in data; name is used
// in error messages.
func Decode(name string, data []byte) (File, error) {
	f, err := decode(name, data)
	if err != nil {
		return File{}, fmt.Errorf("safetensors: %s: %s", name, err)
	}
	return f, nil
}

// decode is Decode, its errors without the file's name.
func decode(name string, data []byte) (File, error) {
	raw, body, err := decodeHeader(name, data)
	if err != nil {
		return File{}, err
	}
	f := File{}
	var spans []span
	for key, value := range raw {
		if key == "__metadata__" {
			if err := json.Unmarshal(value, &f.Metadata); err != nil {
				return File{}, fmt.Errorf("__metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		s, err := decodeEntry(key, value, body, len(data)-len(body))
		if err != nil {
			return File{}, err
		}
		spans = append(spans, s)
	}
	if f.Tensors, err = inDataOrder(spans, len(body)); err != nil {
		return File{}, err
	}
	return f, nil
}

// decodeHeader checks the header's length and parses it, and returns the
// data bytes after it.
func decodeHeader(name string, data []byte) (raw map[string]json.RawMessage, body []byte, err error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("truncated: %d bytes, the header length alone needs 8", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if (n > MaxHeaderSize || uint64(len(data)-8) < n) && isTorchPickle(data) {
		return nil, nil, fmt.Errorf("%s", torchConversionHint(name))
	}
	if n > MaxHeaderSize {
		return nil, nil, fmt.Errorf("header length %d exceeds the %d-byte limit (not a safetensors file?)", n, MaxHeaderSize)
	}
	if uint64(len(data)-8) < n {
		return nil, nil, fmt.Errorf("truncated: header says %d bytes but only %d follow at offset 8", n, len(data)-8)
	}
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("header at offset 8 is not valid JSON: %v", err)
	}
	return raw, data[8+n:], nil
}

// span is a tensor and where its data lies in the data bytes.
type span struct {
	tensor     Tensor
	begin, end int
}

// decodeEntry checks the header entry of tensor key against the data
// bytes (body, at file offset bodyOffset) and returns the tensor.
func decodeEntry(key string, value json.RawMessage, body []byte, bodyOffset int) (span, error) {
	var e headerEntry
	if err := json.Unmarshal(value, &e); err != nil {
		return span{}, fmt.Errorf("tensor %q: bad header entry: %v", key, err)
	}
	size, ok := dtypeSizes[e.DType]
	if !ok {
		return span{}, fmt.Errorf("tensor %q: unknown dtype %q", key, e.DType)
	}
	for _, d := range e.Shape {
		if d < 0 {
			return span{}, fmt.Errorf("tensor %q: negative dimension in shape %v", key, e.Shape)
		}
	}
	begin, end := e.DataOffsets[0], e.DataOffsets[1]
	if begin < 0 || end < begin || end > len(body) {
		return span{}, fmt.Errorf("tensor %q: data offsets [%d, %d) outside the %d data bytes (file offset %d)",
			key, begin, end, len(body), bodyOffset)
	}
	want, ok := byteSize(e.Shape, size)
	if !ok {
		return span{}, fmt.Errorf("tensor %q: shape %v of %s has more bytes than any file", key, e.Shape, e.DType)
	}
	if end-begin != want {
		return span{}, fmt.Errorf("tensor %q: %d data bytes for shape %v of %s (want %d)",
			key, end-begin, e.Shape, e.DType, want)
	}
	t := Tensor{Name: key, DType: e.DType, Shape: slices.Clone(e.Shape), Data: body[begin:end]}
	return span{t, begin, end}, nil
}

// inDataOrder sorts the tensors by where their data lies and checks that
// they cover the size data bytes without a gap or an overlap.
func inDataOrder(spans []span, size int) ([]Tensor, error) {
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var tensors []Tensor
	covered := 0
	for _, s := range spans {
		if s.begin != covered {
			if s.begin < covered {
				return nil, fmt.Errorf("tensor %q: data [%d, %d) overlaps the previous tensor", s.tensor.Name, s.begin, s.end)
			}
			return nil, fmt.Errorf("data bytes [%d, %d) belong to no tensor (before %q)", covered, s.begin, s.tensor.Name)
		}
		covered = s.end
		tensors = append(tensors, s.tensor)
	}
	if covered != size {
		return nil, fmt.Errorf("data bytes [%d, %d) belong to no tensor", covered, size)
	}
	return tensors, nil
}

// ReadFile reads and validates path.
func ReadFile(path string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("safetensors: %w", err)
	}
	return Decode(path, data)
}

// WriteFile writes f to path atomically (WriteAtomic).
func WriteFile(path string, f File) error {
	data, err := Encode(f)
	if err != nil {
		return err
	}
	return WriteAtomic(path, data)
}

// WriteAtomic writes data to path atomically: a temporary file in the
// same directory is written, synced and renamed over path, and the
// directory is synced, so a crash leaves either the old file or the new
// one.
func WriteAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic is WriteAtomic with the content written by write.
func writeAtomic(path string, write func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err := tmp.Chmod(procfs.CreateMode("/proc")); err != nil { // os.CreateTemp's 0600 is no checkpoint's mode
		tmp.Close()
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("safetensors: syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: renaming into %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes the entries of dir (a rename into it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil // nothing to sync on a directory that cannot be opened
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("safetensors: syncing directory %s: %w", dir, err)
	}
	return nil
}
