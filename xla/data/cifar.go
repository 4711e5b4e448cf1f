package data

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/xladdp/xladdp/xla"
)

// CIFAR-10 binary record: one label byte, then 3×32×32 pixel bytes (the red
// plane, then green, then blue).
const (
	cifarPixels = 3 * 32 * 32
	cifarRecord = 1 + cifarPixels
)

// CIFAR10 is the CIFAR-10 train or test split from the binary version's
// data_batch_{1..5}.bin / test_batch.bin: inputs [3, 32, 32] scaled to
// [0, 1] and normalized per channel with Mean and Std.
type CIFAR10 struct {
	records   []byte
	Mean, Std [3]float32
}

// CIFAR-10 per-channel statistics commonly used with torchvision.
var (
	CIFAR10Mean = [3]float32{0.4914, 0.4822, 0.4465}
	CIFAR10Std  = [3]float32{0.2470, 0.2435, 0.2616}
)

// NewCIFAR10 reads the split's batch files from dir.
func NewCIFAR10(dir string, train bool) (*CIFAR10, error) {
	names := []string{"test_batch.bin"}
	if train {
		names = []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}
	}
	c := &CIFAR10{Mean: CIFAR10Mean, Std: CIFAR10Std}
	for _, name := range names {
		path := filepath.Join(dir, name)
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("data: CIFAR-10: %w", err)
		}
		if len(raw)%cifarRecord != 0 {
			full := len(raw) / cifarRecord
			return nil, fmt.Errorf("data: %s: truncated record %d at offset %d (%d of %d bytes)",
				path, full, full*cifarRecord, len(raw)-full*cifarRecord, cifarRecord)
		}
		for r := 0; r < len(raw); r += cifarRecord {
			if raw[r] > 9 {
				return nil, fmt.Errorf("data: %s: record %d at offset %d has label %d, want 0-9", path, r/cifarRecord, r, raw[r])
			}
		}
		c.records = append(c.records, raw...)
	}
	return c, nil
}

// Len returns the number of images.
func (c *CIFAR10) Len() int { return len(c.records) / cifarRecord }

// Get returns image i.
func (c *CIFAR10) Get(i int) (Sample, error) {
	if i < 0 || i >= c.Len() {
		return Sample{}, fmt.Errorf("data: CIFAR-10 index %d outside [0, %d)", i, c.Len())
	}
	rec := c.records[i*cifarRecord : (i+1)*cifarRecord]
	in := make([]float32, cifarPixels)
	for k, p := range rec[1:] {
		ch := k / (32 * 32)
		in[k] = (float32(p)/255 - c.Mean[ch]) / c.Std[ch]
	}
	return Sample{Input: in, Target: []float32{float32(rec[0])}}, nil
}

// InputDims are [3, 32, 32].
func (c *CIFAR10) InputDims() []int { return []int{3, 32, 32} }

// TargetDims are none: a class index.
func (c *CIFAR10) TargetDims() []int { return nil }

// TargetDType is Int32.
func (c *CIFAR10) TargetDType() xla.DType { return xla.Int32 }
