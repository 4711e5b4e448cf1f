package pjrtx

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
)

// The versions whose unexported layout this package reads and writes
// (go:linkname to go-xla's executable constructor, reflect writes into
// its fields, C pointers read from its structs).
const (
	pinnedGoXLA = "v0.4.13"
	pinnedGoMLX = "v0.28.16"
)

// ErrIncompatible: the binary links a go-xla or GoMLX other than the pinned
// versions, whose internals xladdp reads: no backend opens.
var ErrIncompatible = errors.New("xladdp: this binary links a go-xla or GoMLX it was not written against")

// Compatible reports whether the linked go-xla and GoMLX are the pinned
// versions. It is checked once, from the binary's build information;
// every access to their unexported internals asks it first, so another
// version gives this error instead of corrupting memory.
func Compatible() error { return compatible() }

var compatible = sync.OnceValue(func() error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("%w: the binary has no build information to check go-xla's version", ErrIncompatible)
	}
	if len(info.Deps) == 0 && info.Main.Path == ownModule {
		// go test binaries record no dependencies; built inside this
		// module, the versions are go.mod's, which a test pins.
		return nil
	}
	return checkVersions(info.Deps)
})

const ownModule = "github.com/xladdp/xladdp"

// checkVersions requires both modules at their pinned versions, unreplaced.
func checkVersions(deps []*debug.Module) error {
	want := map[string]string{"github.com/gomlx/go-xla": pinnedGoXLA, "github.com/gomlx/gomlx": pinnedGoMLX}
	found := map[string]bool{}
	for _, m := range deps {
		pinned, ok := want[m.Path]
		if !ok {
			continue
		}
		found[m.Path] = true
		if m.Replace != nil {
			by := strings.TrimSpace(m.Replace.Path + " " + m.Replace.Version)
			return fmt.Errorf("%w: %s is %s => %s, but xladdp runs programs through its internals as of %s, unreplaced: "+
				"drop the replace (go mod edit -dropreplace=%s)", ErrIncompatible, m.Path, m.Version, by, pinned, m.Path)
		}
		if m.Version != pinned {
			return fmt.Errorf("%w: %s is %s but xladdp runs programs through its internals as of %s: "+
				"require %s %s in your go.mod (go get %s@%s)", ErrIncompatible, m.Path, m.Version, pinned, m.Path, pinned, m.Path, pinned)
		}
	}
	for path, pinned := range want {
		if !found[path] {
			return fmt.Errorf("%w: %s@%s is not in the binary's build information", ErrIncompatible, path, pinned)
		}
	}
	return nil
}
