package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gomlx/compute"
	"github.com/gomlx/go-xla/pjrt"
	"github.com/gomlx/gomlx/core/graph"

	"github.com/xladdp/xladdp/backend/internal/pjrtx"
)

// ExecutableOf returns the PJRT executable of a GoMLX graph compiled on
// this backend, so it can be run directly or serialized.
func (b *Backend) ExecutableOf(g *graph.Graph) (*pjrt.LoadedExecutable, error) {
	return pjrtx.LoadedExecutableOf(g)
}

// SerializeExecutable returns the plugin's serialized form of e, for a
// persistent compile cache.
func (b *Backend) SerializeExecutable(e *pjrt.LoadedExecutable) ([]byte, error) {
	return pjrtx.Serialize(e)
}

// LoadExecutable loads a serialized executable compiled as SPMD over
// numReplicas devices with deviceAssignment.
func (b *Backend) LoadExecutable(data []byte, numReplicas int, deviceAssignment []int) (*pjrt.LoadedExecutable, error) {
	if numReplicas < 1 || numReplicas != len(deviceAssignment) {
		return nil, fmt.Errorf("%w: loading an executable for %d replicas with device assignment %v",
			ErrBadDeviceCount, numReplicas, deviceAssignment)
	}
	for _, d := range deviceAssignment {
		if d < 0 || d >= len(b.devices) {
			return nil, fmt.Errorf("%w: device assignment %v names devices this client (%d devices) lacks",
				ErrBadDeviceCount, deviceAssignment, len(b.devices))
		}
	}
	return pjrtx.Deserialize(b.client, data, numReplicas, deviceAssignment)
}

// CacheIdentity identifies the plugin build and client configuration a
// compiled executable is valid for: the plugin's contents (pluginDigest),
// platform version, PJRT API version, device count, and the target's
// compiler identity (a compiler's version and flags). It is the same on
// every node that installed the same plugin and compiler, wherever the
// files lie, so a program compiled on one node serves all; executables
// cached under another identity must not be loaded.
func (b *Backend) CacheIdentity() string {
	b.identityOnce.Do(func() {
		major, minor := b.APIVersion()
		b.identity = b.identityOf(b.PlatformVersion(), major, minor)
	})
	return b.identity
}

// identityOf is CacheIdentity given the plugin's platform and API versions.
func (b *Backend) identityOf(platformVersion string, major, minor int) string {
	id := fmt.Sprintf("%s|%s|%s|v%d.%d|%d|%s", b.target, pluginDigest(b.pluginPath), platformVersion, major, minor, len(b.devices), b.compiler)
	if b.kernels != "" {
		// A program with oneDNN's custom calls runs only where they are registered.
		id += "|kernels " + b.kernels
	}
	if b.deterministic {
		// Compiled for a client of DeterministicCPUDevices devices, whatever it shows.
		id += "|deterministic"
	}
	if flags := os.Getenv(EnvXLAFlags); flags != "" {
		// XLA's flags choose how it compiles (keepCPUReductionsInXLA's among them).
		id += "|flags " + flags
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// Sampling of pluginDigest: pieces of the file at evenly spaced offsets.
const (
	digestPieces    = 64
	digestPieceSize = 16 << 10
)

// pluginDigest is the sha256 of a plugin's size and of 64 pieces of 16 KiB
// spread over it (1 MiB read, whatever the plugin's size: some are
// 500 MB): two builds differ in their code and version strings throughout.
// An unreadable plugin gives its path, so nothing is shared with it.
func pluginDigest(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unreadable:" + path
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "unreadable:" + path
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d|", info.Size())
	buf := make([]byte, digestPieceSize)
	for i := range int64(digestPieces) {
		n, err := f.ReadAt(buf, i*max(info.Size()-digestPieceSize, 0)/(digestPieces-1))
		if err != nil && !errors.Is(err, io.EOF) {
			return "unreadable:" + path
		}
		h.Write(buf[:n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Execution is a program started with Execute and not yet known finished.
type Execution struct {
	b       *Backend
	x       *pjrtx.Execution
	release func()
}

// Execute starts e on numDevices devices (inputs device-major) and returns
// its outputs at once, as JAX and torch-xla dispatch: reading an output
// waits until it is computed, and Wait reports how the execution ended.
// keep is held until then (the owners of the inputs). donate (nil, or one
// flag per argument position) gives those inputs to the execution on
// every device, which may write its outputs into them: the caller must
// never read them again. The execution is work in flight: Close waits
// for it.
func (b *Backend) Execute(e *pjrt.LoadedExecutable, numDevices int, inputs []compute.Buffer, donate []bool, keep any) ([]compute.Buffer, *Execution, error) {
	pjrtInputs := make([]*pjrt.Buffer, len(inputs))
	for i, in := range inputs {
		pb, err := pjrtx.PJRTBufferOf(in)
		if err != nil {
			return nil, nil, fmt.Errorf("input %d: %w", i, err)
		}
		pjrtInputs[i] = pb
	}
	release, err := b.Acquire("execution")
	if err != nil {
		return nil, nil, err
	}
	pjrtOuts, x, err := pjrtx.Execute(e, numDevices, pjrtInputs, donate, keep)
	if err != nil {
		release()
		return nil, nil, err
	}
	outs := make([]compute.Buffer, len(pjrtOuts))
	for i, pb := range pjrtOuts {
		if outs[i], err = pjrtx.WrapPJRTBuffer(b.gomlx, pb); err != nil {
			_ = x.Wait()
			release()
			return nil, nil, err
		}
	}
	ex := &Execution{b: b, x: x, release: release}
	b.life.Lock()
	if b.running == nil {
		b.running = map[*Execution]struct{}{}
	}
	b.running[ex] = struct{}{}
	b.idle.Broadcast() // a Close waiting for uses must now wait for this one
	b.life.Unlock()
	return outs, ex, nil
}

// Wait blocks until the execution finished on every device and returns
// its error. Safe to call more than once and from several goroutines.
func (x *Execution) Wait() error {
	err := x.x.Wait()
	x.b.life.Lock()
	_, tracked := x.b.running[x]
	delete(x.b.running, x)
	x.b.life.Unlock()
	if tracked {
		x.release()
	}
	return err
}

// AwaitReady blocks until b's value is computed and returns the error of
// the execution that computes it, if it failed. Read a buffer an
// execution may still be writing only after it.
func (b *Backend) AwaitReady(buf compute.Buffer) error {
	pb, err := pjrtx.PJRTBufferOf(buf)
	if err != nil {
		return fmt.Errorf("waiting for a device buffer: %w", err)
	}
	if err := pjrtx.AwaitReady(pb); err != nil {
		return fmt.Errorf("waiting for a device buffer: %w", err)
	}
	return nil
}

// PJRTBuffer returns the PJRT buffer a GoMLX buffer of this backend holds.
func (b *Backend) PJRTBuffer(buf compute.Buffer) (*pjrt.Buffer, error) {
	return pjrtx.PJRTBufferOf(buf)
}
