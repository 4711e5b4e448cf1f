package exampletest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/antsbees"
	"github.com/xladdp/xladdp/xla/data"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// MNISTSubset writes the first train training and test test images of
// MNIST (make deps installs it) into a new MNIST directory and returns it:
// real digits, at a fraction of the whole set's cost.
func MNISTSubset(t testing.TB, train, test int) string {
	t.Helper()
	dir := t.TempDir()
	for _, split := range []struct {
		prefix string
		n      int
	}{{"train", train}, {"t10k", test}} {
		for _, kind := range []struct {
			suffix string
			rank   int
		}{{"-images-idx3-ubyte", 3}, {"-labels-idx1-ubyte", 1}} {
			name := split.prefix + kind.suffix
			src := filepath.Join(data.DefaultMNISTDir(), name)
			if _, err := os.Stat(src); err != nil {
				src += ".gz"
			}
			dims, values, err := data.ReadIDX(src, kind.rank)
			require.NoError(t, err, "MNIST must be installed: run `make deps`")
			require.LessOrEqual(t, split.n, dims[0], "%s has %d records", src, dims[0])
			per := len(values) / dims[0]
			dims[0] = split.n
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), idx(dims, values[:split.n*per]), 0o644))
		}
	}
	return dir
}

// idx encodes unsigned bytes of dims in the idx format.
func idx(dims []int, values []byte) []byte {
	out := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		out = binary.BigEndian.AppendUint32(out, uint32(d))
	}
	return append(out, values...)
}

// ImageFolder writes an ants/bees ImageFolder under root: train/ with
// perClass images a class and val/ with half as many, of random sizes (36
// to 71 pixels a side), JPEG and PNG, the same on every call. Ants are dark
// red with noise, bees yellow with black vertical stripes, so a network can
// tell them apart from any crop.
func ImageFolder(t testing.TB, root string, perClass int) {
	t.Helper()
	require.NoError(t, antsbees.Write(root, perClass, 3))
}

// ResNet18Weights writes a freshly initialised ImageNet-shaped ResNet-18
// (1000 classes) as a torchvision-named safetensors state dict, the form
// --pretrained reads, and returns its path.
func ResNet18Weights(t testing.TB) string {
	t.Helper()
	d := xlatest.NewEngine(t, 1).Device(0)
	m, err := nn.NewResNet18(d, nn.NewRand(5), nn.ResNetConfig{NumClasses: 1000})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "resnet18.safetensors")
	require.NoError(t, nn.SaveStateDict(xlatest.Context(t), path, m, nil))
	return path
}

// EachSampleOnce checks that the --sample-log files in dir ("epoch index"
// lines, a file per replica) say every sample 0…n-1 of each of epochs
// was used exactly once, and nothing else.
func EachSampleOnce(t *testing.T, dir string, epochs, n int) {
	t.Helper()
	used := map[string]int{}
	files, err := filepath.Glob(filepath.Join(dir, "replica-*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no sample logs in %s", dir)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for line := range strings.Lines(string(b)) {
			used[strings.TrimSpace(line)]++
		}
	}
	for epoch := range epochs {
		for sample := range n {
			id := fmt.Sprintf("%d %d", epoch, sample)
			assert.Equal(t, 1, used[id], "epoch %d: sample %d used %d times", epoch, sample, used[id])
			delete(used, id)
		}
	}
	assert.Empty(t, used, "samples outside the %d epochs", epochs)
}
