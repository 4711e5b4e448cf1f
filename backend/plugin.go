package backend

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// EnvPluginPath names a PJRT plugin file to load instead of searching.
const EnvPluginPath = "XLADDP_PJRT_PLUGIN"

// envGoXLAPluginPaths is go-xla's own list of plugin directories; honoured
// so a setup made for GoMLX keeps working.
const envGoXLAPluginPaths = "PJRT_PLUGIN_LIBRARY_PATH"

// pjrtAPISymbol is the one function every PJRT plugin exports.
const pjrtAPISymbol = "GetPjrtApi"

// pluginDirs lists the directories go-xla searches by default, in its order:
// $PJRT_PLUGIN_LIBRARY_PATH if set, else ~/.local/lib/go-xla and
// /usr/local/lib/go-xla.
func pluginDirs() []string {
	if v := os.Getenv(envGoXLAPluginPaths); v != "" {
		var dirs []string
		for _, d := range strings.Split(v, ":") {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		return dirs
	}
	var dirs []string
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "lib", "go-xla"))
	}
	return append(dirs, "/usr/local/lib/go-xla")
}

// locatePlugin returns the absolute path of the plugin to load and where
// it came from: the explicit path, $XLADDP_PJRT_PLUGIN, or the target's search.
func locatePlugin(ctx context.Context, spec TargetSpec, explicit string) (path, source string, err error) {
	switch {
	case explicit != "":
		path, err = existingFile(explicit, "the plugin path given")
		return path, "option", err
	case os.Getenv(EnvPluginPath) != "":
		path, err = existingFile(os.Getenv(EnvPluginPath), "$"+EnvPluginPath)
		return path, "$" + EnvPluginPath, err
	}
	var searched []string
	for _, dir := range pluginDirs() {
		candidate := filepath.Join(dir, spec.PluginFile)
		searched = append(searched, candidate)
		if isFile(candidate) {
			path, err = filepath.Abs(candidate)
			return path, "search", err
		}
	}
	if spec.PythonPackageGlob != "" {
		sitePackages, pyErr := pythonSitePackages(ctx)
		for _, dir := range sitePackages {
			pattern := filepath.Join(dir, spec.PythonPackageGlob)
			searched = append(searched, pattern)
			if found := newestMatch(pattern); found != "" {
				return found, "search", nil
			}
		}
		if pyErr != nil {
			searched = append(searched, fmt.Sprintf("(python site-packages: %v)", pyErr))
		}
	}
	return "", "", fmt.Errorf("%w for %s: looked for %s; %s, or set $%s to the plugin's path",
		ErrPluginNotFound, spec.Target, strings.Join(searched, ", "), spec.InstallHint, EnvPluginPath)
}

// existingFile returns the absolute form of path after checking it is a file.
func existingFile(path, what string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s %q: %v", ErrPluginNotFound, what, path, err)
	}
	info, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s %q does not exist: check the path, or run `make deps` to install the CPU plugin",
			ErrPluginNotFound, what, path)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s %q: %v", ErrPluginNotFound, what, path, err)
	}
	if info.IsDir() {
		return "", fmt.Errorf("%w: %s %q is a directory: give the plugin's .so file inside it", ErrNotPlugin, what, path)
	}
	return abs, nil
}

func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

// newestMatch returns the lexically last file matching pattern, so
// xla_cuda13 is preferred over xla_cuda12.
func newestMatch(pattern string) string {
	matches, _ := filepath.Glob(pattern)
	for i := len(matches) - 1; i >= 0; i-- {
		if isFile(matches[i]) {
			return matches[i]
		}
	}
	return ""
}

// elfMachines maps GOARCH to the ELF machine a plugin must be built for.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// validatePlugin checks, without loading it, that path is a shared library
// for this machine that exports GetPjrtApi. dlopen of an arbitrary file runs
// its initialisers in our process, so a wrong file must be refused first.
func validatePlugin(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %s is not an ELF shared library (%v): point at the plugin's .so file, e.g. pjrt_c_api_cpu_plugin.so",
			ErrNotPlugin, path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return fmt.Errorf("%w: %s is an ELF %s, not a shared library", ErrNotPlugin, path, f.Type)
	}
	if want, ok := elfMachines[runtime.GOARCH]; ok && f.Machine != want {
		return fmt.Errorf("%w: %s is built for %s but this machine is %s: install the plugin for this architecture",
			ErrNotPlugin, path, f.Machine, runtime.GOARCH)
	}
	symbols, err := f.DynamicSymbols()
	if err != nil {
		return fmt.Errorf("%w: %s has no dynamic symbol table (%v)", ErrNotPlugin, path, err)
	}
	for _, s := range symbols {
		if s.Name == pjrtAPISymbol && s.Section != elf.SHN_UNDEF {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is a shared library but does not export %s: it is not a PJRT plugin",
		ErrNotPlugin, path, pjrtAPISymbol)
}
