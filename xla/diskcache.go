package xla

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvCacheDir is where compiled programs persist across runs; "off"
// disables the persistent cache. Default: <user cache dir>/xladdp/xla.
const EnvCacheDir = "XLADDP_CACHE_DIR"

// cacheFileMagic starts every cache file; the version digit changes with the format.
var cacheFileMagic = []byte("XLADDPX2")

// cacheHeader describes a cached program; the serialized executable follows
// it. Everything that decides the executable is in it, and a load checks
// every field against what was asked for.
type cacheHeader struct {
	// Identity is the plugin build and client configuration.
	Identity string `json:"identity"`
	// Lowering identifies the code that turned the trace into XLA (see
	// loweringIdentity); XLAFlags is $XLA_FLAGS at compile time.
	Lowering         string   `json:"lowering"`
	XLAFlags         string   `json:"xla_flags"`
	Fingerprint      string   `json:"fingerprint"`
	Replicas         int      `json:"replicas"`
	DeviceAssignment []int    `json:"device_assignment"`
	Inputs           []string `json:"inputs"`
	OutputShapes     []string `json:"output_shapes"`
	Outputs          int      `json:"outputs"`
	Description      []string `json:"description"`
}

// matches reports the first field in which a loaded header differs from
// the one asked for.
func (h cacheHeader) matches(want cacheHeader) error {
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"plugin", h.Identity, want.Identity},
		{"lowering", h.Lowering, want.Lowering},
		{"XLA_FLAGS", h.XLAFlags, want.XLAFlags},
		{"program fingerprint", h.Fingerprint, want.Fingerprint},
		{"replicas", h.Replicas, want.Replicas},
		{"device assignment", fmt.Sprint(h.DeviceAssignment), fmt.Sprint(want.DeviceAssignment)},
		{"inputs", fmt.Sprint(h.Inputs), fmt.Sprint(want.Inputs)},
		{"output shapes", fmt.Sprint(h.OutputShapes), fmt.Sprint(want.OutputShapes)},
		{"outputs", h.Outputs, want.Outputs},
	} {
		if f.got != f.want {
			return fmt.Errorf("cached for another %s (%v, not %v)", f.name, f.got, f.want)
		}
	}
	return nil
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
	dir string
	// identity, lowering and xlaFlags are the parts of the key that do not
	// depend on the program.
	identity, lowering, xlaFlags string
}

// path names the file of a program by a hash of its whole header.
func (c *diskCache) path(want cacheHeader) string {
	h := sha256.New()
	key, _ := json.Marshal(struct {
		cacheHeader
		Description []string `json:"description,omitempty"`
	}{cacheHeader: want})
	h.Write(key)
	return filepath.Join(c.dir, hex.EncodeToString(h.Sum(nil))+".xlaexec")
}

// header is what a program compiled now would be cached under.
func (c *diskCache) header(fp fingerprint, devices []int, tr *trace) cacheHeader {
	h := cacheHeader{
		Identity: c.identity, Lowering: c.lowering, XLAFlags: c.xlaFlags,
		Fingerprint: hex.EncodeToString(fp[:]), Replicas: len(devices), DeviceAssignment: devices,
		Outputs: len(tr.outputs),
	}
	for _, p := range tr.params {
		h.Inputs = append(h.Inputs, p.shape.String())
	}
	for _, o := range tr.outputs {
		h.OutputShapes = append(h.OutputShapes, o.shape.String())
	}
	return h
}

// load returns the cached header and executable bytes, or fs.ErrNotExist.
// A file that does not parse, or whose header differs from want in any
// field (another program, plugin, lowering or XLA_FLAGS), is an error the
// caller treats as a miss.
func (c *diskCache) load(want cacheHeader) (cacheHeader, []byte, error) {
	var h cacheHeader
	path := c.path(want)
	data, err := os.ReadFile(path)
	if err != nil {
		return h, nil, err
	}
	h, executable, err := readCacheFile(data)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := h.matches(want); err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, executable, nil
}

// readCacheFile splits a cache file into its header and executable.
func readCacheFile(data []byte) (cacheHeader, []byte, error) {
	var h cacheHeader
	if !bytes.HasPrefix(data, cacheFileMagic) || len(data) < len(cacheFileMagic)+4 {
		return h, nil, errors.New("not an xladdp cache file of this version")
	}
	rest := data[len(cacheFileMagic):]
	n := binary.LittleEndian.Uint32(rest)
	if uint64(n) > uint64(len(rest)-4) {
		return h, nil, errors.New("truncated header")
	}
	if err := json.Unmarshal(rest[4:4+n], &h); err != nil {
		return h, nil, fmt.Errorf("header: %w", err)
	}
	return h, rest[4+n:], nil
}

// store writes the program atomically: a temp file in the same directory,
// fsync, rename. Concurrent writers of the same program are harmless.
func (c *diskCache) store(h cacheHeader, executable []byte) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
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
	return os.Rename(tmp.Name(), c.path(h))
}
