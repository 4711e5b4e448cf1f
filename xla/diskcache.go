package xla

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// EnvCacheDir is where compiled programs persist across runs; "off"
// disables the persistent cache. Default: <user cache dir>/xladdp/xla.
const EnvCacheDir = "XLADDP_CACHE_DIR"

// cacheFileMagic starts every cache file; the version digit changes with the format.
var cacheFileMagic = []byte("XLADDPX1")

// cacheHeader describes a cached program; the serialized executable follows it.
type cacheHeader struct {
	Identity         string   `json:"identity"`
	Replicas         int      `json:"replicas"`
	DeviceAssignment []int    `json:"device_assignment"`
	Outputs          int      `json:"outputs"`
	Description      []string `json:"description"`
}

// resolveCacheDir returns the persistent cache directory, or "" if disabled.
func resolveCacheDir() string {
	switch v := os.Getenv(EnvCacheDir); v {
	case "off":
		return ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(base, "xladdp", "xla")
	default:
		return v
	}
}

// diskCache stores serialized executables, one file per program.
type diskCache struct {
	dir      string
	identity string
}

func (c *diskCache) path(key programKey) string {
	h := sha256.New()
	h.Write(key.fingerprint[:])
	h.Write([]byte(key.devices))
	h.Write([]byte(c.identity))
	return filepath.Join(c.dir, hex.EncodeToString(h.Sum(nil))+".xlaexec")
}

// load returns the cached header and executable bytes, or fs.ErrNotExist.
// A file that does not parse, or was written for another plugin build, is
// an error the caller treats as a miss.
func (c *diskCache) load(key programKey) (cacheHeader, []byte, error) {
	var h cacheHeader
	data, err := os.ReadFile(c.path(key))
	if err != nil {
		return h, nil, err
	}
	if !bytes.HasPrefix(data, cacheFileMagic) || len(data) < len(cacheFileMagic)+4 {
		return h, nil, fmt.Errorf("%s: not an xladdp cache file", c.path(key))
	}
	rest := data[len(cacheFileMagic):]
	n := binary.LittleEndian.Uint32(rest)
	if uint64(n) > uint64(len(rest)-4) {
		return h, nil, fmt.Errorf("%s: truncated header", c.path(key))
	}
	if err := json.Unmarshal(rest[4:4+n], &h); err != nil {
		return h, nil, fmt.Errorf("%s: header: %w", c.path(key), err)
	}
	if h.Identity != c.identity {
		return h, nil, fmt.Errorf("%s: compiled for another plugin build", c.path(key))
	}
	return h, rest[4+n:], nil
}

// store writes the program atomically: a temp file in the same directory,
// fsync, rename. Concurrent writers of the same program are harmless.
func (c *diskCache) store(key programKey, h cacheHeader, executable []byte) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	h.Identity = c.identity
	header, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-*.xlaexec")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	var size [4]byte
	binary.LittleEndian.PutUint32(size[:], uint32(len(header)))
	for _, part := range [][]byte{cacheFileMagic, size[:], header, executable} {
		if _, err := tmp.Write(part); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.path(key))
}
