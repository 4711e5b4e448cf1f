package progcache

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

// cacheFileMagic starts every cache file; the version digit changes with the format.
var cacheFileMagic = []byte("XLADDPX2")

// Header describes a cached program; the serialized executable follows
// it. Everything that decides the executable is in it, and a load checks
// every field against what was asked for.
type Header struct {
	// Identity is the plugin build and client configuration.
	Identity string `json:"identity"`
	// Lowering identifies the code that lowered the program (see
	// LoweringIdentity); XLAFlags is $XLA_FLAGS at compile time.
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
func (h Header) matches(want Header) error {
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

// ResolveDir is the persistent cache directory a setting names ("off":
// none, returned as ""; empty: <user cache dir>/xladdp/xla).
func ResolveDir(v string) string {
	switch v {
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

// Disk stores serialized executables, one file per program.
type Disk struct {
	Dir string
	// Identity, Lowering and XLAFlags are the parts of the key that do not
	// depend on the program (see Header).
	Identity, Lowering, XLAFlags string
}

// Path names the file of a program by its Name.
func (c *Disk) Path(want Header) string { return filepath.Join(c.Dir, Name(want)+".xlaexec") }

// Name is a program's key: a hash of its whole header but the
// description, the same in every process and on every node that would
// compile the same executable.
func Name(want Header) string {
	h := sha256.New()
	key, _ := json.Marshal(struct {
		Header
		Description []string `json:"description,omitempty"`
	}{Header: want})
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil))
}

// Decode is a cache file's executable when its header is want's, else
// an error naming the first field that differs (a file of another
// program, plugin, compiler, lowering or XLA_FLAGS, or not a cache file).
func Decode(data []byte, want Header) (Header, []byte, error) {
	h, executable, err := ParseFile(data)
	if err != nil {
		return h, nil, err
	}
	if err := h.matches(want); err != nil {
		return h, nil, err
	}
	return h, executable, nil
}

// Header is what a program compiled now would be cached under, for the
// fields that depend on the program.
func (c *Disk) Header(fingerprint string, devices []int, inputs, outputShapes []string) Header {
	return Header{
		Identity: c.Identity, Lowering: c.Lowering, XLAFlags: c.XLAFlags,
		Fingerprint: fingerprint, Replicas: len(devices), DeviceAssignment: devices,
		Inputs: inputs, OutputShapes: outputShapes, Outputs: len(outputShapes),
	}
}

// Load returns the cached header and executable bytes, or fs.ErrNotExist.
// A file that does not parse, or whose header differs from want in any
// field (another program, plugin, lowering or XLA_FLAGS), is an error the
// caller treats as a miss.
func (c *Disk) Load(want Header) (Header, []byte, error) {
	var h Header
	path := c.Path(want)
	data, err := os.ReadFile(path)
	if err != nil {
		return h, nil, err
	}
	h, executable, err := Decode(data, want)
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, executable, nil
}

// ParseFile splits a cache file into its header and executable.
func ParseFile(data []byte) (Header, []byte, error) {
	var h Header
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

// Encode is the cache file of a program: the magic, the header's length
// and JSON, the executable.
func Encode(h Header, executable []byte) ([]byte, error) {
	header, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(cacheFileMagic)+4+len(header)+len(executable))
	out = append(out, cacheFileMagic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(header)))
	out = append(out, header...)
	return append(out, executable...), nil
}

// Store writes the program atomically: a temp file in the same directory,
// fsync, rename. Concurrent writers of the same program are harmless.
func (c *Disk) Store(h Header, executable []byte) error {
	file, err := Encode(h, executable)
	if err != nil {
		return err
	}
	return c.StoreFile(h, file)
}

// StoreFile writes an encoded program (Encode's) under h, atomically.
func (c *Disk) StoreFile(h Header, file []byte) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-*.xlaexec")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(file); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.Path(h))
}
