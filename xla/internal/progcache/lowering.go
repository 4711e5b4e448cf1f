package progcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// loweringModules are the modules whose code turns a trace into the XLA
// program: ours (the op replays) and GoMLX and go-xla (the graph and the
// StableHLO it emits).
var loweringModules = []string{"github.com/xladdp/xladdp", "github.com/gomlx/gomlx", "github.com/gomlx/go-xla"}

// LoweringIdentity names the code that lowers traces, for the persistent
// cache key: a change in how any op lowers must not serve an old program.
// Released versions of the three modules name it exactly; when any of them
// is a development build, replaced, or missing from the build information
// (go test binaries record none), the hash of the running binary does,
// which covers every change at the cost of recompiling after a rebuild.
var LoweringIdentity = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if ok {
		if id, exact := moduleVersions(info); exact {
			return id
		}
	}
	sum, err := executableHash()
	if err != nil {
		return "unknown-binary:" + err.Error() // unique enough to miss, never to hit wrongly across builds
	}
	return "binary:" + sum
})

// moduleVersions returns the lowering modules' versions, exact only when
// all are released versions without replacement.
func moduleVersions(info *debug.BuildInfo) (string, bool) {
	byPath := map[string]*debug.Module{info.Main.Path: &info.Main}
	for _, m := range info.Deps {
		byPath[m.Path] = m
	}
	id := ""
	for _, path := range loweringModules {
		m := byPath[path]
		if m == nil || m.Replace != nil || m.Version == "" || m.Version == "(devel)" {
			return "", false
		}
		id += fmt.Sprintf("%s@%s;", path, m.Version)
	}
	return id, true
}

func executableHash() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
