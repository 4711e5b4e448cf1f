package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/pkg/core/graph"

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
// compiled executable is valid for: plugin path, size and modification
// time, platform version, PJRT API version and device count. Executables
// cached under another identity must not be loaded.
func (b *Backend) CacheIdentity() string {
	major, minor := b.APIVersion()
	id := fmt.Sprintf("%s|%s|%s|v%d.%d|%d", b.target, b.pluginPath, b.PlatformVersion(), major, minor, len(b.devices))
	if info, err := os.Stat(b.pluginPath); err == nil {
		id += fmt.Sprintf("|%d|%d", info.Size(), info.ModTime().UnixNano())
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}
