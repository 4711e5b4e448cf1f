package data

import (
	"fmt"
	"image"
	_ "image/jpeg" // registers the JPEG decoder
	_ "image/png"  // registers the PNG decoder
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/xladdp/xladdp/xla"
)

// ImageNet per-channel statistics, torchvision's usual Normalize.
var (
	ImageNetMean = [3]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float32{0.229, 0.224, 0.225}
)

// ImageFolderConfig says how images become tensors.
type ImageFolderConfig struct {
	// Transforms run in order; they must leave a Size×Size image.
	Transforms []Transform
	Size       int
	// Mean and Std normalize each channel after scaling to [0, 1].
	Mean, Std [3]float32
	// Seed seeds the random transforms, with the epoch and sample index.
	Seed uint64
}

// ImageFolder is torchvision's ImageFolder: root/<class>/<image> with JPEG
// or PNG images, in subdirectories of a class too, symbolic links
// followed; classes are the sorted directory names, labels their indices.
// Hidden directories and files are skipped, and a class without images is
// an error. Inputs are [3, Size, Size].
type ImageFolder struct {
	root    string
	classes []string
	files   []string
	labels  []int
	cfg     ImageFolderConfig
	epoch   atomic.Int64
}

var imageExtensions = []string{".jpg", ".jpeg", ".png"}

// NewImageFolder scans root.
func NewImageFolder(root string, cfg ImageFolderConfig) (*ImageFolder, error) {
	if cfg.Size < 1 {
		return nil, fmt.Errorf("data: ImageFolder %s: output size %d must be positive", root, cfg.Size)
	}
	if cfg.Std == [3]float32{} {
		cfg.Std = [3]float32{1, 1, 1}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: ImageFolder: %w", err)
	}
	f := &ImageFolder{root: root, cfg: cfg}
	var empty []string
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		// Hidden directories (.ipynb_checkpoints, which Jupyter leaves in
		// SageMaker notebooks' folders) are not classes.
		if strings.HasPrefix(e.Name(), ".") || !isDir(dir, e) {
			continue
		}
		label := len(f.classes)
		f.classes = append(f.classes, e.Name())
		before := len(f.files)
		if err := f.addImages(dir, label, 0); err != nil {
			return nil, err
		}
		if len(f.files) == before {
			empty = append(empty, e.Name())
		}
	}
	if len(f.classes) == 0 {
		return nil, fmt.Errorf("data: ImageFolder %s: no class directories (want root/<class>/<image>.jpg)", root)
	}
	if len(empty) > 0 {
		return nil, fmt.Errorf("data: ImageFolder %s: no .jpg, .jpeg or .png images for the class(es) %s (every class directory needs one)", root, strings.Join(empty, ", "))
	}
	return f, nil
}

// maxFolderDepth bounds the walk under a class directory, which follows
// symbolic links as torchvision's does, so a link cycle ends.
const maxFolderDepth = 16

// addImages adds the images under dir and its subdirectories, sorted.
func (f *ImageFolder) addImages(dir string, label, depth int) error {
	if depth > maxFolderDepth {
		return fmt.Errorf("data: ImageFolder: %s is more than %d directories deep (a symbolic-link cycle?)", dir, maxFolderDepth)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data: ImageFolder: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), "."):
		case isDir(path, e):
			if err := f.addImages(path, label, depth+1); err != nil {
				return err
			}
		case slices.Contains(imageExtensions, strings.ToLower(filepath.Ext(e.Name()))):
			f.files = append(f.files, path)
			f.labels = append(f.labels, label)
		}
	}
	return nil
}

// isDir reports whether e, at path, is a directory or a link to one.
func isDir(path string, e os.DirEntry) bool {
	if e.Type()&os.ModeSymlink == 0 {
		return e.IsDir()
	}
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// Classes returns the class names in label order.
func (f *ImageFolder) Classes() []string { return slices.Clone(f.classes) }

// SetEpoch changes the random transforms' draws for the next epoch.
func (f *ImageFolder) SetEpoch(epoch int) { f.epoch.Store(int64(epoch)) }

// Len returns the number of images.
func (f *ImageFolder) Len() int { return len(f.files) }

// Get decodes and transforms image i.
func (f *ImageFolder) Get(i int) (Sample, error) {
	if i < 0 || i >= len(f.files) {
		return Sample{}, fmt.Errorf("data: ImageFolder index %d outside [0, %d)", i, len(f.files))
	}
	path := f.files[i]
	file, err := os.Open(path)
	if err != nil {
		return Sample{}, fmt.Errorf("data: %w", err)
	}
	img, format, err := image.Decode(file)
	file.Close()
	if err != nil {
		return Sample{}, fmt.Errorf("data: %s: unreadable image: %w", path, err)
	}
	rng := rand.New(rand.NewPCG(f.cfg.Seed^uint64(f.epoch.Load())<<32, uint64(i)))
	for _, t := range f.cfg.Transforms {
		img = t.Apply(img, rng)
	}
	b := img.Bounds()
	if b.Dx() != f.cfg.Size || b.Dy() != f.cfg.Size {
		return Sample{}, fmt.Errorf("data: %s (%s): transforms produced %d×%d, want %d×%d (end them with a crop)",
			path, format, b.Dx(), b.Dy(), f.cfg.Size, f.cfg.Size)
	}
	n := f.cfg.Size * f.cfg.Size
	in := make([]float32, 3*n)
	for y := range f.cfg.Size {
		for x := range f.cfg.Size {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			for ch, v := range [3]uint32{r, g, bl} {
				in[ch*n+y*f.cfg.Size+x] = (float32(v>>8)/255 - f.cfg.Mean[ch]) / f.cfg.Std[ch]
			}
		}
	}
	return Sample{Input: in, Target: []float32{float32(f.labels[i])}}, nil
}

// InputDims are [3, Size, Size].
func (f *ImageFolder) InputDims() []int { return []int{3, f.cfg.Size, f.cfg.Size} }

// TargetDims are none: a class index.
func (f *ImageFolder) TargetDims() []int { return nil }

// TargetDType is Int32.
func (f *ImageFolder) TargetDType() xla.DType { return xla.Int32 }
