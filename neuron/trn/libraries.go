package trn

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/xladdp/xladdp/internal/readlimit"
)

// MissingLibraries lists the shared libraries lib needs (its DT_NEEDED
// entries) that the dynamic loader would not find: not in its RPATH or
// RUNPATH, $LD_LIBRARY_PATH, the directories of /etc/ld.so.conf, nor the
// default ones. Checked before the plugin loads, so that a missing Neuron
// runtime is named with its package instead of dlopen's bare error.
func MissingLibraries(lib string, getenv func(string) string) ([]string, error) {
	f, err := elf.Open(lib)
	if err != nil {
		return nil, fmt.Errorf("neuron: %s is not a shared library: %w", lib, err)
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("neuron: reading what %s needs: %w", lib, err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range filepath.SplitList(p) {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(lib)))
			}
		}
	}
	dirs = append(dirs, filepath.SplitList(getenv("LD_LIBRARY_PATH"))...)
	dirs = append(dirs, ldSoConfDirs("/etc/ld.so.conf", 0)...)
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
		"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
	var missing []string
	for _, name := range needed {
		if !foundIn(name, dirs) {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

func foundIn(name string, dirs []string) bool {
	if strings.Contains(name, "/") {
		_, err := os.Stat(name)
		return err == nil
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return true
		}
	}
	return false
}

// ldSoConfDirs reads the loader's configuration: one directory a line,
// "include GLOB" lines followed (to a depth of 4, against loops).
func ldSoConfDirs(path string, depth int) []string {
	if depth > 4 {
		return nil
	}
	f, err := readlimit.OpenRegular(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "include "); ok {
			pattern := strings.TrimSpace(rest)
			if !filepath.IsAbs(pattern) {
				pattern = filepath.Join(filepath.Dir(path), pattern)
			}
			files, _ := filepath.Glob(pattern)
			for _, conf := range files {
				dirs = append(dirs, ldSoConfDirs(conf, depth+1)...)
			}
			continue
		}
		if line != "" {
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// libraryPackages are the Neuron packages that install a library the
// plugin needs.
var libraryPackages = map[string]string{
	"libnrt.so.1":   "aws-neuronx-runtime-lib",
	"libnccom.so.2": "aws-neuronx-collectives",
	"libncfw.so.2":  "aws-neuronx-runtime-lib",
}

// MissingLibraryFix says what installs the missing libraries.
func MissingLibraryFix(missing []string) string {
	var pkgs []string
	for _, m := range missing {
		if p, ok := libraryPackages[m]; ok && !strings.Contains(strings.Join(pkgs, " "), p) {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) == 0 {
		return "install the packages that provide them, or add their directories to LD_LIBRARY_PATH"
	}
	return "install " + strings.Join(pkgs, " and ") + " (apt or yum, from the Neuron repository; they go to /opt/aws/neuron/lib), " +
		"or add the directory holding them to LD_LIBRARY_PATH"
}
