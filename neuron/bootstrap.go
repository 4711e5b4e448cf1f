package neuron

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/neuron/trn"
)

var bootOnce = struct {
	sync.Mutex
	done         bool
	path, source string
}{}

// bootstrapPlugin is backend's bootstrap for the neuron target, once per
// process. It finds libneuronxla without running Python (trn.FindSDK)
// and takes the road its version needs: libneuronxla 3 (Neuron SDK 2.30
// and later) runs neuronx-cc itself, so the plugin is loaded directly and
// no Python enters the process; libneuronxla 2 compiles by calling back
// into Python, so an embedded interpreter imports it first. A package
// whose version the files do not tell is asked through its Python.
func bootstrapPlugin(ctx context.Context, opts backend.Options) (string, string, error) {
	bootOnce.Lock()
	defer bootOnce.Unlock()
	if bootOnce.done {
		return bootOnce.path, bootOnce.source, nil
	}
	sdk, found, searched, err := trn.FindSDK(os.Getenv)
	if err != nil {
		return "", "", err
	}
	var path, source string
	if found && sdk.Libneuronxla != "" && !sdk.NeedsPython() {
		path, source, err = bootstrapDirect(opts, sdk)
	} else {
		path, source, err = bootstrapWithPython(ctx, opts, searched)
	}
	if err != nil {
		return "", "", err
	}
	bootOnce.done, bootOnce.path, bootOnce.source = true, path, source
	return path, source, nil
}

// bootstrapDirect prepares libneuronxla 3's plugin: checks what it needs
// (its libraries, neuronx-cc), sets the job's Neuron environment, puts
// neuronx-cc on PATH and tells the plugin the PJRT C API version xladdp
// speaks. The loader then opens it like any other plugin.
func bootstrapDirect(opts backend.Options, sdk trn.SDK) (string, string, error) {
	if problems := sdk.Problems(os.Getenv); len(problems) > 0 {
		return "", "", fmt.Errorf("neuron: %s", problems[0])
	}
	if err := applyEnvironment(opts.Replicas); err != nil {
		return "", "", err
	}
	putOnPath(filepath.Dir(sdk.Compiler))
	if os.Getenv(trn.EnvPJRTAPIVersion) == "" {
		if err := os.Setenv(trn.EnvPJRTAPIVersion, backend.ClientAPIVersion()); err != nil {
			return "", "", err
		}
	}
	slog.Debug("neuron: the plugin loads without Python", "sdk", sdk.String(), "pjrt_c_api", os.Getenv(trn.EnvPJRTAPIVersion))
	return sdk.Plugin, sdk.String(), nil
}

// bootstrapWithPython is libneuronxla 2's road: find the Python
// environment holding it, start an embedded interpreter from its
// libpython that has imported libneuronxla (the plugin compiles by
// calling back into it), release the interpreter's lock, put neuronx-cc
// on PATH, and return the plugin's path. A libneuronxla 3 its Python
// reports takes the direct road after all.
func bootstrapWithPython(ctx context.Context, opts backend.Options, searched []string) (string, string, error) {
	python, from, err := findPython(os.Getenv)
	if err != nil {
		return "", "", fmt.Errorf("%w (libneuronxla is in none of %s)", err, strings.Join(searched, ", "))
	}
	env, err := probe(ctx, python)
	if err != nil {
		return "", "", err
	}
	if env.NeuronXLAError == "" && !(trn.SDK{Libneuronxla: env.NeuronXLA}).NeedsPython() {
		sdk := trn.SDK{Libneuronxla: env.NeuronXLA, Where: python + " (" + from + ")", SitePackages: env.Prefix,
			Plugin: env.PluginPath, Compiler: env.NeuronxCC}
		if p := os.Getenv(trn.EnvLibraryPath); p != "" {
			sdk.Plugin = p
		}
		return bootstrapDirect(opts, sdk)
	}
	if err := env.check(python+" ("+from+")", os.Getenv); err != nil {
		return "", "", err
	}
	// The plugin reads the process's place in the job from its
	// environment when it loads: set it as torch-xla does.
	if err := applyEnvironment(opts.Replicas); err != nil {
		return "", "", err
	}
	if err := embedPython(env); err != nil {
		return "", "", err
	}
	putOnPath(filepath.Dir(env.NeuronxCC))
	path, source := env.PluginPath, "libneuronxla "+env.NeuronXLA+" in "+env.Prefix+", loaded through an embedded Python ("+env.LibPython+")"
	if p := os.Getenv(trn.EnvLibraryPath); p != "" {
		path, source = p, "$NEURON_LIBRARY_PATH, loaded through an embedded Python ("+env.LibPython+")"
	}
	return path, source, nil
}

// putOnPath puts dir first on PATH unless it is there already: the plugin
// runs neuronx-cc by name.
func putOnPath(dir string) {
	sep := string(os.PathListSeparator)
	if strings.Contains(sep+os.Getenv("PATH")+sep, sep+dir+sep) {
		return
	}
	_ = os.Setenv("PATH", dir+sep+os.Getenv("PATH"))
}
