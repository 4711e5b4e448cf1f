package backend

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// Target is the kind of device a backend drives.
type Target string

// The targets package backend registers itself. Others come from the
// packages that register them, which a program links (package targets
// links them all).
const (
	CPU  Target = "cpu"
	CUDA Target = "cuda"
)

// Environment variables that choose the target. XLADDP_DEVICE wins;
// PJRT_DEVICE is torch-xla's name, accepted so users' habits carry over.
const (
	EnvDevice     = "XLADDP_DEVICE"
	EnvPJRTDevice = "PJRT_DEVICE"
)

// Bootstrap prepares a target whose plugin needs more than loading (an
// embedded interpreter that must be running first, say) and returns the
// plugin's path and where it came from. It sees the Open options
// (Replicas tells how many local devices a one-process job drives).
type Bootstrap func(ctx context.Context, opts Options) (path, source string, err error)

// TargetSpec describes a device target whole, as RegisterTarget takes it:
// its names, how its plugin is found or prepared, how its client is
// configured, and what can be checked before it starts.
type TargetSpec struct {
	// Target is the canonical name; Aliases are other accepted spellings
	// (all matched without regard to case).
	Target  Target
	Aliases []string
	// PluginFile is searched for in go-xla's plugin directories, then
	// PythonPackageGlob (relative to each site-packages directory).
	PluginFile        string
	PythonPackageGlob string
	// InstallHint says how to get the plugin, for the not-found error.
	InstallHint string
	// SharedBuffers: the device's memory is the host's, so GoMLX may
	// read and write its buffers in place (go-xla's "shared_buffers").
	SharedBuffers bool
	// ClientOptions returns the PJRT client create options for opts, or
	// an error for options the target does not take.
	ClientOptions func(opts Options) (map[string]any, error)
	// Platform is the platform name the plugin must report (empty: any).
	Platform string
	// Bootstrap, when set, prepares the plugin instead of the search
	// (unless a plugin path is given).
	Bootstrap Bootstrap
	// DeviceCount reads the local device count a launcher's environment
	// gives the target (ok false when it gives none).
	DeviceCount func(getenv func(string) string) (n int, ok bool, err error)
	// Preflight lists what would keep the target from starting on this
	// machine, each with its fix (xladevices prints them).
	Preflight func() []string
	// CompilerIdentity names what, besides the plugin, decides a compiled
	// program (a compiler the plugin runs, its version and flags), read
	// when the client opens; compiled programs are cached under it.
	CompilerIdentity func() string
	// ProcessEnv is the environment (KEY=VALUE) that gives process index
	// of count, started one per local device (ddp.Spawn's process mode),
	// that device alone; getenv reads the parent's environment.
	ProcessEnv func(index, count int, getenv func(string) string) ([]string, error)
}

// ProcessEnv is target t's environment for process index of count
// started one per local device (see TargetSpec.ProcessEnv); none when
// the target sets none.
func ProcessEnv(t Target, index, count int, getenv func(string) string) ([]string, error) {
	spec, err := lookupTarget(t)
	if err != nil || spec.ProcessEnv == nil {
		return nil, err
	}
	return spec.ProcessEnv(index, count, getenv)
}

var registry = struct {
	sync.RWMutex
	specs   map[Target]TargetSpec
	aliases map[string]Target
}{specs: map[Target]TargetSpec{}, aliases: map[string]Target{}}

// RegisterTarget makes a target available to Open, ParseTarget and the
// launchers, as image.RegisterFormat does for decoders. A package that
// provides a target calls it from init; registering a name twice panics,
// since two packages would then claim one device.
func RegisterTarget(spec TargetSpec) {
	registry.Lock()
	defer registry.Unlock()
	if spec.Target == "" || spec.ClientOptions == nil {
		panic("backend: RegisterTarget needs a Target name and ClientOptions")
	}
	names := append([]string{string(spec.Target)}, spec.Aliases...)
	for _, name := range names {
		if _, dup := registry.aliases[strings.ToLower(name)]; dup {
			panic(fmt.Sprintf("backend: target name %q registered twice", strings.ToLower(name)))
		}
	}
	for _, name := range names {
		registry.aliases[strings.ToLower(name)] = spec.Target
	}
	registry.specs[spec.Target] = spec
}

// Targets returns the registered targets, sorted.
func Targets() []Target {
	registry.RLock()
	defer registry.RUnlock()
	var out []Target
	for t := range registry.specs {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// lookupTarget returns the spec of a registered target.
func lookupTarget(t Target) (TargetSpec, error) {
	registry.RLock()
	spec, ok := registry.specs[t]
	registry.RUnlock()
	if !ok {
		return TargetSpec{}, unknownTarget(string(t))
	}
	return spec, nil
}

func unknownTarget(name string) error {
	registry.RLock()
	var names []string
	for alias, t := range registry.aliases {
		if alias == string(t) {
			names = append(names, alias)
		} else {
			names = append(names, alias+" ("+string(t)+")")
		}
	}
	registry.RUnlock()
	slices.Sort(names)
	return fmt.Errorf("%w %q: this program knows %s; a target another package provides must be linked "+
		"(every target: import _ \"github.com/xladdp/xladdp/targets\", as ddp does, unless a build tag left it out)",
		ErrUnknownTarget, name, strings.Join(names, ", "))
}

// ParseTarget accepts a registered target's name or alias in any case
// (torch-xla's CPU, CUDA, GPU included).
func ParseTarget(s string) (Target, error) {
	registry.RLock()
	t, ok := registry.aliases[strings.ToLower(strings.TrimSpace(s))]
	registry.RUnlock()
	if !ok {
		return "", unknownTarget(s)
	}
	return t, nil
}

// String returns the target's canonical name.
func (t Target) String() string { return string(t) }

// ResolveTarget is the target Open picks for explicit: explicit itself,
// else XLADDP_DEVICE, else PJRT_DEVICE, else cpu. A bad value names the
// variable it came from.
func ResolveTarget(explicit Target) (Target, error) {
	if explicit != "" {
		return ParseTarget(string(explicit))
	}
	for _, name := range []string{EnvDevice, EnvPJRTDevice} {
		if v, ok := os.LookupEnv(name); ok && v != "" {
			t, err := ParseTarget(v)
			if err != nil {
				return "", fmt.Errorf("$%s: %w", name, err)
			}
			return t, nil
		}
	}
	return CPU, nil
}

// Preflight is what target t's registration says would keep it from
// starting here (nil for a target without checks or not registered).
func Preflight(t Target) []string {
	spec, err := lookupTarget(t)
	if err != nil || spec.Preflight == nil {
		return nil
	}
	return spec.Preflight()
}

// LocalDeviceCount is the local device count a launcher's environment
// gives, read through every registered target's DeviceCount in name
// order (a device-count variable a target's launcher sets); ok is false when
// none gives one. A variable that is set but wrong is an error.
func LocalDeviceCount(getenv func(string) string) (n int, ok bool, err error) {
	for _, t := range Targets() {
		spec, _ := lookupTarget(t)
		if spec.DeviceCount == nil {
			continue
		}
		if n, ok, err := spec.DeviceCount(getenv); ok || err != nil {
			return n, ok, err
		}
	}
	return 0, false, nil
}
