package zero

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/xladdp/xladdp/xla/safetensors"
)

// Each survivor vouches for the files it wrote into a salvage directory
// (sums-<rank>.json: each file's SHA-256), so that a file changed on disk
// between the commit and the resume is refused by name, never trained
// from. Two survivors holding one piece vouch for the same bytes.
func sumsFileName(rank int) string { return fmt.Sprintf("sums-%05d.json", rank) }

// fileSums is a survivor's word on the files it wrote: name → SHA-256.
type fileSums map[string]string

func (s fileSums) add(name string, data []byte) {
	sum := sha256.Sum256(data)
	s[name] = hex.EncodeToString(sum[:])
}

// write writes s as rank's sums in dir.
func (s fileSums) write(dir string, rank int) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return safetensors.WriteAtomic(filepath.Join(dir, sumsFileName(rank)), data)
}

// sumsMaxBytes bounds a sums file: a line a file, of a few hundred bytes.
const sumsMaxBytes = 16 << 20

// readVouched is every survivor's sums in dir: file name → the hashes
// the survivors wrote it with.
func readVouched(dir string) (map[string][]string, error) {
	names, _ := filepath.Glob(filepath.Join(dir, "sums-*.json"))
	vouched := map[string][]string{}
	for _, n := range names {
		data, err := readRegular(n, sumsMaxBytes)
		if err != nil {
			return nil, err
		}
		var s fileSums
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%s: not valid JSON: %w", n, err)
		}
		for file, sum := range s {
			vouched[file] = append(vouched[file], sum)
		}
	}
	return vouched, nil
}

// checkVouched refuses data, file name's bytes, unless a survivor wrote
// it so.
func checkVouched(vouched map[string][]string, name string, data []byte) error {
	sums := vouched[name]
	if len(sums) == 0 {
		return fmt.Errorf("%s: no survivor says it wrote it (no sums-*.json lists it)", name)
	}
	got := sha256.Sum256(data)
	for _, want := range sums {
		if want != hex.EncodeToString(got[:]) {
			return fmt.Errorf("%s changed since a survivor wrote it (its SHA-256 is %x…, written as %.12s…)", name, got[:6], want)
		}
	}
	return nil
}
