package neuron

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static void* xl_dlopen(const char* path) { return dlopen(path, RTLD_NOW | RTLD_GLOBAL); }
static void* xl_dlsym(void* h, const char* name) { return dlsym(h, name); }
static const char* xl_dlerror(void) { return dlerror(); }

// The few CPython entry points the bootstrap calls, through pointers from
// dlsym: no Python headers at build time.
static int xl_is_initialized(void* f) { return ((int (*)(void))f)(); }
static void xl_initialize_ex(void* f) { ((void (*)(int))f)(0); }
static int xl_run_simple_string(void* f, const char* code) { return ((int (*)(const char*))f)(code); }
static void* xl_save_thread(void* f) { return ((void* (*)(void))f)(); }
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/xladdp/xladdp/neuron/trn"
)

// pythonEnv is what the interpreter reports about its environment.
type pythonEnv struct {
	Executable, Prefix, BasePrefix string
	Version                        string
	Path                           []string
	LibPython                      string `json:"libpython"`
	NeuronXLA                      string `json:"neuronxla"`
	NeuronXLAError                 string `json:"neuronxla_error"`
	PluginPath                     string `json:"plugin_path"`
	NeuronxCC                      string `json:"neuronx_cc"`
}

// probeScript prints pythonEnv as JSON.
const probeScript = `
import json, os, shutil, sys, sysconfig
out = {"Executable": sys.executable, "Prefix": sys.prefix, "BasePrefix": sys.base_prefix,
       "Version": "%d.%d" % sys.version_info[:2], "Path": [p for p in sys.path if p]}
libdir, so = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
out["libpython"] = os.path.join(libdir, so) if libdir and so else ""
try:
    import libneuronxla
    out["neuronxla"] = getattr(libneuronxla, "__version__", "")
    from libneuronxla.libneuronpjrt_path import libneuronpjrt_path
    out["plugin_path"] = libneuronpjrt_path()
except Exception as e:
    out["neuronxla_error"] = "%s: %s" % (type(e).__name__, e)
bindir = os.path.dirname(sys.executable)
out["neuronx_cc"] = shutil.which("neuronx-cc", path=bindir) or shutil.which("neuronx-cc") or ""
print(json.dumps(out))
`

// findPython returns the interpreter to ask.
func findPython(getenv func(string) string) (string, string, error) {
	if p := getenv(trn.EnvPython); p != "" {
		return p, "$" + trn.EnvPython, nil
	}
	if venv := getenv("VIRTUAL_ENV"); venv != "" {
		p := filepath.Join(venv, "bin", "python3")
		if _, err := os.Stat(p); err == nil {
			return p, "$VIRTUAL_ENV", nil
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", "", fmt.Errorf("neuron: no Python found: the Neuron plugin needs the Python environment holding libneuronxla; "+
			"set $%s to its python3 (or activate its virtualenv)", trn.EnvPython)
	}
	return p, "python3 on PATH", nil
}

// probe asks python about its environment, once.
func probe(ctx context.Context, python string) (pythonEnv, error) {
	out, err := exec.CommandContext(ctx, python, "-c", probeScript).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return pythonEnv{}, fmt.Errorf("neuron: %s failed to describe its environment: %v: %s", python, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return pythonEnv{}, fmt.Errorf("neuron: running %s: %w", python, err)
	}
	var env pythonEnv
	if err := json.Unmarshal(out, &env); err != nil {
		return pythonEnv{}, fmt.Errorf("neuron: %s's description is not JSON: %w", python, err)
	}
	return env, nil
}

// check turns what the probe found into the first missing piece, if any.
func (e pythonEnv) check(python string, getenv func(string) string) error {
	switch {
	case e.NeuronXLAError != "":
		return fmt.Errorf("neuron: %s cannot import libneuronxla (%s): pip install libneuronxla in that environment "+
			"(from the Neuron repository, https://pip.repos.neuron.amazonaws.com), or point $%s at the python3 that has it",
			python, e.NeuronXLAError, trn.EnvPython)
	case e.NeuronXLA != "" && trn.VersionLess(e.NeuronXLA, trn.MinLibneuronxla):
		return fmt.Errorf("neuron: libneuronxla %s in %s is older than %s: pip install -U libneuronxla", e.NeuronXLA, e.Prefix, trn.MinLibneuronxla)
	case getenv(trn.EnvLibraryPath) == "" && e.PluginPath == "":
		return fmt.Errorf("neuron: libneuronxla in %s names no plugin (libneuronpjrt_path() is empty): reinstall libneuronxla, or set NEURON_LIBRARY_PATH", e.Prefix)
	case e.NeuronxCC == "":
		return fmt.Errorf("neuron: neuronx-cc (the Neuron compiler libneuronxla calls) is not in %s or on PATH: pip install neuronx-cc in that environment",
			filepath.Dir(e.Executable))
	case e.LibPython == "":
		return fmt.Errorf("neuron: %s has no shared libpython to embed: install the interpreter's shared library (Debian: apt-get install libpython%s) "+
			"or use a Python built with --enable-shared", python, e.Version)
	}
	if _, err := os.Stat(e.LibPython); err != nil {
		return fmt.Errorf("neuron: %s's shared library %s is missing: install it (Debian: apt-get install libpython%s)", python, e.LibPython, e.Version)
	}
	return nil
}

// embedPython starts CPython from env's libpython with env's module path,
// imports libneuronxla, and releases the GIL for the plugin's callbacks.
func embedPython(env pythonEnv) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lib := C.CString(env.LibPython)
	defer C.free(unsafe.Pointer(lib))
	h := C.xl_dlopen(lib)
	if h == nil {
		return fmt.Errorf("neuron: loading %s: %s", env.LibPython, C.GoString(C.xl_dlerror()))
	}
	sym := func(name string) (unsafe.Pointer, error) {
		n := C.CString(name)
		defer C.free(unsafe.Pointer(n))
		p := C.xl_dlsym(h, n)
		if p == nil {
			return nil, fmt.Errorf("neuron: %s has no %s: not a CPython shared library", env.LibPython, name)
		}
		return p, nil
	}
	isInit, err1 := sym("Py_IsInitialized")
	initEx, err2 := sym("Py_InitializeEx")
	run, err3 := sym("PyRun_SimpleString")
	save, err4 := sym("PyEval_SaveThread")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	if C.xl_is_initialized(isInit) != 0 {
		return nil // an interpreter already runs in this process
	}
	// The interpreter reads its home and module path from the
	// environment at start; restore ours afterwards, so child processes
	// (neuronx-cc among them) see what they saw before.
	restore := setEnvFor(map[string]string{"PYTHONHOME": env.BasePrefix, "PYTHONPATH": strings.Join(env.Path, string(os.PathListSeparator)),
		"PYTHONNOUSERSITE": "1"})
	C.xl_initialize_ex(initEx)
	restore()
	code := C.CString("import libneuronxla")
	defer C.free(unsafe.Pointer(code))
	if C.xl_run_simple_string(run, code) != 0 {
		return fmt.Errorf("neuron: the embedded Python (%s) could not import libneuronxla (its traceback is on stderr)", env.LibPython)
	}
	C.xl_save_thread(save)
	return nil
}

// setEnvFor sets vars and returns the function that puts the previous
// values back.
func setEnvFor(vars map[string]string) func() {
	type old struct {
		v  string
		ok bool
	}
	saved := map[string]old{}
	for k, v := range vars {
		prev, ok := os.LookupEnv(k)
		saved[k] = old{prev, ok}
		_ = os.Setenv(k, v)
	}
	return func() {
		for k, o := range saved {
			if o.ok {
				_ = os.Setenv(k, o.v)
			} else {
				_ = os.Unsetenv(k)
			}
		}
	}
}
