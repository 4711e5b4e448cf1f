package trn

import (
	"fmt"
	"os"
)

// MinLibneuronxla is the oldest libneuronxla xladdp loads (the first with
// libneuronpjrt_path and PJRT C API plugins).
const MinLibneuronxla = "2.0"

// Problems are what stops s from loading, each with its fix: no plugin
// in the package, a package older than MinLibneuronxla, no neuronx-cc,
// and (for libneuronxla 3, which the loader alone opens) a library the
// plugin needs that the loader would not find.
func (s SDK) Problems(getenv func(string) string) []Problem {
	var out []Problem
	add := func(what, fix string) { out = append(out, Problem{Check: "neuron sdk", What: what, Fix: fix}) }
	if info, err := os.Stat(s.Plugin); err != nil || !info.Mode().IsRegular() {
		if getenv(EnvLibraryPath) != "" {
			add(fmt.Sprintf("$%s=%s is not a file", EnvLibraryPath, s.Plugin), "point it at libneuronpjrt.so, or unset it to use libneuronxla's own")
		} else {
			add(fmt.Sprintf("libneuronxla %s in %s has no %s: a broken install", orUnknown(s.Libneuronxla), s.SitePackages, pluginFile),
				"pip install --force-reinstall libneuronxla in that environment")
		}
	}
	if s.Libneuronxla != "" && VersionLess(s.Libneuronxla, MinLibneuronxla) {
		add(fmt.Sprintf("libneuronxla %s in %s is older than %s", s.Libneuronxla, s.SitePackages, MinLibneuronxla),
			"pip install -U libneuronxla (from https://pip.repos.neuron.amazonaws.com)")
	}
	if s.Compiler == "" {
		where := "on PATH"
		if s.Where != "" {
			where = "next to libneuronxla (" + s.Where + ") or on PATH"
		}
		env := s.Env
		if env == "" {
			env = "the Python whose site-packages are " + s.SitePackages
		}
		add("neuronx-cc, the compiler libneuronxla runs, is not "+where, "pip install neuronx-cc in "+env+", or put its bin/ on PATH")
	}
	if len(out) == 0 && !s.NeedsPython() {
		missing, err := MissingLibraries(s.Plugin, getenv)
		switch {
		case err != nil:
			add(err.Error(), "pip install --force-reinstall libneuronxla")
		case len(missing) > 0:
			add(fmt.Sprintf("%s needs %v, which the loader does not find", s.Plugin, missing), MissingLibraryFix(missing))
		}
	}
	return out
}
