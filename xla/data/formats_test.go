package data

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// cifarRecordFor builds one binary CIFAR-10 record with label and every
// pixel of channel c equal to (c+1)*50.
func cifarRecordFor(label byte) []byte {
	rec := make([]byte, cifarRecord)
	rec[0] = label
	for k := range cifarPixels {
		rec[1+k] = byte((k/(32*32) + 1) * 50)
	}
	return rec
}

func TestCIFAR10(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test_batch.bin"), append(cifarRecordFor(3), cifarRecordFor(9)...), 0o644))
	c, err := NewCIFAR10(dir, false)
	require.NoError(t, err)
	require.Equal(t, 2, c.Len())
	s, err := c.Get(1)
	require.NoError(t, err)
	assert.Equal(t, []float32{9}, s.Target)
	for ch, k := range []int{0, 1024, 2048} {
		want := (float32((ch+1)*50)/255 - CIFAR10Mean[ch]) / CIFAR10Std[ch]
		assert.InDelta(t, want, s.Input[k], 1e-6, "channel %d", ch)
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "test_batch.bin"), append(cifarRecordFor(3), 1, 2, 3), 0o644))
	_, err = NewCIFAR10(dir, false)
	assert.ErrorContains(t, err, "test_batch.bin: truncated record 1 at offset 3073 (3 of 3073 bytes)")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test_batch.bin"), cifarRecordFor(12), 0o644))
	_, err = NewCIFAR10(dir, false)
	assert.ErrorContains(t, err, "record 0 at offset 0 has label 12, want 0-9")
	_, err = NewCIFAR10(dir, true)
	assert.ErrorContains(t, err, "data_batch_1.bin")
}

// writeImage writes a w×h image, left half red and right half blue, as PNG
// or JPEG.
func writeImage(t *testing.T, path string, w, h int) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{255, 0, 0, 255}
			if x >= w/2 {
				c = color.RGBA{0, 0, 255, 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	if filepath.Ext(path) == ".png" {
		require.NoError(t, png.Encode(&buf, img))
	} else {
		require.NoError(t, jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95}))
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestImageFolder(t *testing.T) {
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "bees", "b1.png"), 40, 20)
	writeImage(t, filepath.Join(root, "ants", "a1.jpg"), 30, 30)
	writeImage(t, filepath.Join(root, "ants", "a2.JPEG"), 16, 24)
	require.NoError(t, os.WriteFile(filepath.Join(root, "ants", "notes.txt"), []byte("skip me"), 0o644))

	f, err := NewImageFolder(root, ImageFolderConfig{
		Transforms: []Transform{Resize{Size: 10}, CenterCrop{Size: 10}}, Size: 10, Std: [3]float32{1, 1, 1},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"ants", "bees"}, f.Classes())
	require.Equal(t, 3, f.Len())
	s, err := f.Get(2) // bees/b1.png: 40×20 → 20×10 → center 10×10, left half red
	require.NoError(t, err)
	assert.Equal(t, []float32{1}, s.Target)
	assert.InDelta(t, 1, s.Input[0], 1e-6, "red channel at the left edge")
	assert.InDelta(t, 0, s.Input[200+0], 1e-6, "blue channel at the left edge")
	assert.InDelta(t, 0, s.Input[9], 1e-6, "red channel at the right edge")
	assert.InDelta(t, 1, s.Input[200+9*10+9], 1e-6, "blue channel at the bottom-right")

	random, err := NewImageFolder(root, ImageFolderConfig{
		Transforms: []Transform{RandomResizedCrop{Size: 8}, RandomHorizontalFlip{P: 0.5}}, Size: 8, Seed: 3,
	})
	require.NoError(t, err)
	first, err := random.Get(0)
	require.NoError(t, err)
	again, err := random.Get(0)
	require.NoError(t, err)
	assert.Equal(t, first.Input, again.Input, "the same epoch and index give the same crop")
	differs := false
	for e := 1; e < 6 && !differs; e++ {
		random.SetEpoch(e)
		other, err := random.Get(0)
		require.NoError(t, err)
		differs = !assert.ObjectsAreEqual(first.Input, other.Input)
	}
	assert.True(t, differs, "another epoch draws another crop")

	require.NoError(t, os.WriteFile(filepath.Join(root, "bees", "broken.jpg"), []byte("not a jpeg"), 0o644))
	f, err = NewImageFolder(root, ImageFolderConfig{Transforms: []Transform{Resize{Size: 10}, CenterCrop{Size: 10}}, Size: 10})
	require.NoError(t, err)
	_, err = f.Get(3)
	assert.ErrorContains(t, err, filepath.Join("bees", "broken.jpg")+": unreadable image")
	noCrop, err := NewImageFolder(root, ImageFolderConfig{Transforms: []Transform{Resize{Size: 10}}, Size: 10})
	require.NoError(t, err)
	_, err = noCrop.Get(2)
	assert.ErrorContains(t, err, "transforms produced 20×10, want 10×10 (end them with a crop)")
	_, err = NewImageFolder(t.TempDir(), ImageFolderConfig{Size: 8})
	assert.ErrorContains(t, err, "no class directories")
}

// TestImageFolderWalksLikeTorchvision: class directories and images may
// be symbolic links and images may sit in subdirectories; hidden entries
// (Jupyter's .ipynb_checkpoints) are no class; a class without images and
// a link cycle are errors naming them; a dangling link is skipped.
func TestImageFolderWalksLikeTorchvision(t *testing.T) {
	elsewhere := t.TempDir()
	writeImage(t, filepath.Join(elsewhere, "wasps", "w1.png"), 8, 8)
	writeImage(t, filepath.Join(elsewhere, "a9.png"), 8, 8)
	root := t.TempDir()
	writeImage(t, filepath.Join(root, "ants", "a1.png"), 8, 8)
	writeImage(t, filepath.Join(root, "ants", "more", "a2.png"), 8, 8)
	writeImage(t, filepath.Join(root, "ants", ".hidden.png"), 8, 8)
	writeImage(t, filepath.Join(root, ".ipynb_checkpoints", "c.png"), 8, 8)
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "wasps"), filepath.Join(root, "wasps")))
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "a9.png"), filepath.Join(root, "ants", "a9.png")))
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "gone"), filepath.Join(root, "dangling")))
	f, err := NewImageFolder(root, ImageFolderConfig{Size: 8})
	require.NoError(t, err)
	assert.Equal(t, []string{"ants", "wasps"}, f.Classes())
	assert.Equal(t, []string{filepath.Join(root, "ants", "a1.png"), filepath.Join(root, "ants", "a9.png"),
		filepath.Join(root, "ants", "more", "a2.png"), filepath.Join(root, "wasps", "w1.png")}, f.files)
	assert.Equal(t, []int{0, 0, 0, 1}, f.labels)
	s, err := f.Get(1)
	require.NoError(t, err, "a linked image reads")
	assert.Len(t, s.Input, 3*8*8)

	require.NoError(t, os.MkdirAll(filepath.Join(root, "bees", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "bees", "notes.txt"), nil, 0o644))
	_, err = NewImageFolder(root, ImageFolderConfig{Size: 8})
	assert.ErrorContains(t, err, "no .jpg, .jpeg or .png images for the class(es) bees")

	require.NoError(t, os.RemoveAll(filepath.Join(root, "bees")))
	require.NoError(t, os.Symlink(filepath.Join(root, "ants"), filepath.Join(root, "ants", "more", "loop")))
	_, err = NewImageFolder(root, ImageFolderConfig{Size: 8})
	assert.ErrorContains(t, err, "directories deep (a symbolic-link cycle?)")
}

func TestRandomDataset(t *testing.T) {
	r, err := NewRandom(10, []int{3}, nil, 4, 1)
	require.NoError(t, err)
	a, err := r.Get(7)
	require.NoError(t, err)
	b, err := r.Get(7)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the same seed gives the same sample")
	assert.Len(t, a.Input, 3)
	assert.True(t, a.Target[0] >= 0 && a.Target[0] < 4)
	assert.Equal(t, xla.Int32, r.TargetDType())
	reg, err := NewRandom(5, []int{2, 2}, []int{3}, 0, 1)
	require.NoError(t, err)
	s, err := reg.Get(0)
	require.NoError(t, err)
	assert.Len(t, s.Target, 3)
	assert.Equal(t, xla.Float32, reg.TargetDType())
	_, err = NewRandom(0, []int{3}, nil, 2, 1)
	assert.ErrorContains(t, err, "sizes must be positive")
}
