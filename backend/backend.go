package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	gomlxbackends "github.com/gomlx/compute"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"

	"github.com/xladdp/xladdp/backend/internal/buildhook"
	"github.com/xladdp/xladdp/backend/internal/pjrtx"
	"github.com/xladdp/xladdp/internal/readlimit"
)

func init() {
	// GoMLX would otherwise download plugins from GitHub, which hangs or
	// fails offline; `make deps` installs the plugin from PyPI instead.
	gomlxxla.EnableAutoInstall(false)
}

// Backend is an opened PJRT client on one target, usable as a GoMLX backend.
type Backend struct {
	target     Target
	pluginPath string
	// compiler is the target's CompilerIdentity at Open.
	compiler string
	// kernels names what runs the CPU target's convolutions inside its
	// programs ("onednn 2.6.3" or "xla"; cpu_kernels.go).
	kernels      string
	pluginSource string
	gomlx        *gomlxxla.Backend
	// programs is what the engine builds programs on: gomlx, or gomlx
	// with the CPU's convolutions put in as oneDNN's custom calls.
	programs gomlxbackends.Backend
	client   *pjrt.Client
	devices  []Device

	// life guards closing against uses in flight (lifecycle.go).
	life     sync.Mutex
	idle     sync.Cond
	inFlight int
	closed   bool
	onClose  []func()
	// running are the executions started and not yet waited for; Close
	// waits for them before draining.
	running map[*Execution]struct{}

	identityOnce sync.Once
	identity     string
	// deterministic: b's programs are compiled deterministic
	// (Options.Deterministic, deterministicFlags).
	deterministic bool
}

// Deterministic reports whether b's programs are compiled deterministic
// (Options.Deterministic): on the CPU target they sum the same way
// whatever the process's device count and threads.
func (b *Backend) Deterministic() bool { return b.deterministic }

// Open finds the target's PJRT plugin, loads it and creates a client.
//
// The plugin is, in order: opts.PluginPath, $XLADDP_PJRT_PLUGIN, then a
// search of go-xla's plugin directories ($PJRT_PLUGIN_LIBRARY_PATH, else
// ~/.local/lib/go-xla and /usr/local/lib/go-xla) for
// pjrt_c_api_<target>_plugin.so, then the site-packages of python3 (or
// $XLADDP_PYTHON) for a pip-installed plugin: lammps_jax_pjrt_cpu for cpu,
// JAX's jax_plugins/xla_cuda*/xla_cuda_plugin.so for cuda.
//
// Loading cannot be interrupted once started; if ctx ends first Open returns
// its error and releases the client when the load finishes.
func Open(ctx context.Context, opts Options) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("opening backend: %w", err)
	}
	if opts.Replicas < 0 {
		return nil, fmt.Errorf("%w: Options.Replicas=%d: give the number of local replicas (0 for the default)",
			ErrBadDeviceCount, opts.Replicas)
	}
	// The engine runs programs through go-xla's internals: another
	// version is refused first, by name, before any plugin loads.
	if err := pjrtx.Compatible(); err != nil {
		return nil, err
	}
	target, err := ResolveTarget(opts.Target)
	if err != nil {
		return nil, err
	}
	spec, err := lookupTarget(target)
	if err != nil {
		return nil, err
	}
	if opts.Deterministic, err = deterministicOption(opts); err != nil {
		return nil, err
	}
	clientOptions, err := spec.ClientOptions(opts)
	if err != nil {
		return nil, err
	}
	path, source, err := findPlugin(ctx, spec, opts)
	if err != nil {
		return nil, err
	}
	if target == CUDA {
		disableGoXLACUDACheck()
	}
	det, err := deterministicFlags(target, path, opts.Deterministic)
	if err != nil {
		return nil, err
	}

	gb, client, err := loadGoMLX(ctx, path, spec.SharedBuffers, clientOptions, opts.KeyValue)
	if err != nil {
		return nil, fmt.Errorf("%w: %s plugin %s (from %s): %w", ErrClient, target, path, source, err)
	}
	b := &Backend{target: target, pluginPath: path, pluginSource: source, gomlx: gb, programs: gb, client: client, deterministic: det}
	if spec.CompilerIdentity != nil {
		b.compiler = spec.CompilerIdentity()
	}
	b.idle.L = &b.life
	if err := b.setUp(spec, opts); err != nil {
		gb.Finalize()
		return nil, err
	}
	return b, nil
}

// findPlugin finds the target's plugin, bootstrapping it where the target
// can and no path is given, and checks that it is a PJRT plugin this XLA
// can load.
func findPlugin(ctx context.Context, spec TargetSpec, opts Options) (path, source string, err error) {
	if spec.Bootstrap != nil && opts.PluginPath == "" && os.Getenv(EnvPluginPath) == "" {
		if path, source, err = spec.Bootstrap(ctx, opts); err != nil {
			err = fmt.Errorf("%w: %w", ErrTargetUnavailable, err)
		}
	} else {
		path, source, err = locatePlugin(ctx, spec, opts.PluginPath)
	}
	if err != nil {
		return "", "", err
	}
	if err := readlimit.CheckRegular(path); err != nil { // its reads (and dlopen) would wait forever on a FIFO
		return "", "", fmt.Errorf("%w: the plugin (%s): %w", ErrNotPlugin, source, err)
	}
	if err := validatePlugin(path); err != nil {
		return "", "", err
	}
	if strings.Contains(path, ",") {
		return "", "", fmt.Errorf("%w: plugin path %q contains a comma, which GoMLX's backend config cannot carry: "+
			"link the plugin to a path without one", ErrNotPlugin, path)
	}
	if _, _, err := pjrtx.ProbeAPI(path); err != nil {
		return "", "", fmt.Errorf("%w: %w: use a PJRT plugin built for this XLA (see docs/plugins.md, \"PJRT plugins\")", ErrNotPlugin, err)
	}
	return path, source, nil
}

// setUp reads the new client's devices (as many as asked for on a
// deterministic CPU), loads the CPU's kernels, and checks the plugin's
// platform and device count against the target and opts; Open finalizes
// the client where it fails.
func (b *Backend) setUp(spec TargetSpec, opts Options) error {
	target, path, source := b.target, b.pluginPath, b.pluginSource
	if err := b.describe(); err != nil {
		return fmt.Errorf("%w: %s plugin %s: %w", ErrClient, target, path, err)
	}
	if target == CPU && b.deterministic {
		// The client has DeterministicCPUDevices; the caller sees what it asked for.
		if want, err := cpuDeviceCount(opts); err == nil && want < len(b.devices) {
			b.devices = b.devices[:want]
		}
	}
	if target == CPU {
		var err error
		if b.kernels, err = cpuKernels(b.client.Plugin()); err != nil {
			return err
		}
		if b.kernels != "xla" {
			b.programs = buildhook.Wrap(b.gomlx, oneDNNConvolution)
		}
		shareConvolutionThreads(len(b.devices), b.deterministic)
	}
	if got := strings.ToLower(b.Platform()); spec.Platform != "" && got != spec.Platform {
		return fmt.Errorf("%w: the target is %s but %s (from %s) is a %s plugin: point the plugin path "+
			"(--plugin, $XLADDP_PJRT_PLUGIN) at a %s plugin, or choose the %s target", ErrNotPlugin, target, path, source, got,
			target, got)
	}
	if opts.Replicas > len(b.devices) {
		return fmt.Errorf("%w: %d local replicas asked for but the %s plugin has %d addressable device(s)",
			ErrBadDeviceCount, opts.Replicas, target, len(b.devices))
	}
	return nil
}

// loadGoMLX creates the GoMLX XLA backend in a goroutine so ctx can end the wait.
func loadGoMLX(ctx context.Context, path string, sharedBuffers bool, options map[string]any, kv KeyValueStore) (*gomlxxla.Backend, *pjrt.Client, error) {
	type result struct {
		backend *gomlxxla.Backend
		client  *pjrt.Client
		err     error
	}
	done := make(chan result, 1)
	go func() {
		// GoMLX reports some failures by panicking; a plugin problem must
		// reach the caller as an error, not end the process.
		defer func() {
			if p := recover(); p != nil {
				done <- result{nil, nil, fmt.Errorf("GoMLX panicked while creating the backend: %v", p)}
			}
		}()
		gb, client, err := pjrtx.NewBackend(path, pjrtx.BackendOptions{Options: options, SharedBuffers: sharedBuffers,
			KeyValue: kv, HasKeyValue: kv != nil})
		done <- result{gb, client, err}
	}()
	select {
	case r := <-done:
		return r.backend, r.client, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.backend != nil {
				r.backend.Finalize()
			}
		}()
		return nil, nil, fmt.Errorf("waiting for the plugin to load: %w", ctx.Err())
	}
}

// disableGoXLACUDACheck turns off go-xla's CUDA driver check unless
// the user set it: when it finds an nvidia/ directory it writes a path from
// its author's machine into XLA_FLAGS (go-xla's pjrt/cuda_linux.go, cudaPluginCheckDrivers).
func disableGoXLACUDACheck() {
	const env = "GOPJRT_CUDA_CHECKS"
	if _, set := os.LookupEnv(env); !set {
		_ = os.Setenv(env, "0")
	}
}

// describe fills the device list from the client.
func (b *Backend) describe() error {
	pjrtDevices := b.client.AddressableDevices()
	if len(pjrtDevices) == 0 {
		return errors.New("the client has no addressable devices")
	}
	infos, err := pjrtx.Describe(b.pluginPath, pjrtDevices)
	if err != nil {
		return err
	}
	b.devices = make([]Device, len(pjrtDevices))
	for i, d := range pjrtDevices {
		desc, err := d.GetDescription()
		if err != nil {
			return fmt.Errorf("device %d description: %w", i, err)
		}
		b.devices[i] = Device{
			Num:             i,
			ID:              infos[i].ID,
			Kind:            infos[i].Kind,
			ProcessIndex:    desc.ProcessIndex(),
			LocalHardwareID: d.LocalHardwareID(),
			Description:     desc.DebugString(),
		}
	}
	return nil
}

// GoMLX returns the backend to build and run GoMLX graphs with. Its
// programs' convolutions are XLA's; see Programs.
func (b *Backend) GoMLX() gomlxbackends.Backend { return b.gomlx }

// Programs returns the backend to build GoMLX graphs on that b runs
// itself (Execute): GoMLX's, with the target's own convolutions (the CPU
// target's oneDNN) built into them. Data (buffers, tensors) stay
// GoMLX's: run such a graph through Execute, not graph.Run.
func (b *Backend) Programs() gomlxbackends.Backend { return b.programs }

// Target returns the target the backend drives.
func (b *Backend) Target() Target { return b.target }

// PluginPath returns the absolute path of the loaded plugin.
func (b *Backend) PluginPath() string { return b.pluginPath }

// PluginSource says how the plugin was found: "option", "$XLADDP_PJRT_PLUGIN" or "search".
func (b *Backend) PluginSource() string { return b.pluginSource }

// Platform returns the client's platform name, e.g. "cpu" or "cuda".
func (b *Backend) Platform() string { return b.client.Platform() }

// PlatformVersion returns the client's platform version string.
func (b *Backend) PlatformVersion() string { return b.client.PlatformVersion() }

// APIVersion returns the PJRT C API version the plugin reports.
func (b *Backend) APIVersion() (major, minor int) { return b.client.Plugin().Version() }

// ProcessIndex returns this client's process index (0 when single-process).
func (b *Backend) ProcessIndex() int { return b.client.ProcessIndex() }

// Devices returns the addressable devices, in DeviceNum order.
func (b *Backend) Devices() []Device { return append([]Device(nil), b.devices...) }

// NumDevices returns the number of addressable devices.
func (b *Backend) NumDevices() int { return len(b.devices) }

// ClientAPIVersion is the PJRT C API version ("0.104") of the argument
// structs xladdp passes to every plugin, for a target whose plugin serves
// several versions and must be told which before it loads.
func ClientAPIVersion() string {
	major, minor := pjrtx.HeaderVersion()
	return fmt.Sprintf("%d.%d", major, minor)
}
