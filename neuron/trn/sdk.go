package trn

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/readlimit"
)

// SDK is an installed libneuronxla (the Neuron PJRT plugin's package) and
// the compiler it calls, as found without running Python: from the
// package's dist-info in the site-packages of a virtualenv, a DLAMI venv
// or the system.
type SDK struct {
	// Libneuronxla is the package's version ("3.0.2891.0"); "" when the
	// package has no dist-info to read it from (then ask its Python).
	Libneuronxla string
	// Where says how it was found ("$VIRTUAL_ENV", "the DLAMI venv", ...);
	// SitePackages is the directory holding it, Env the Python
	// environment's root ("" when it was found outside one).
	Where, SitePackages, Env string
	// Plugin is libneuronpjrt.so; $NEURON_LIBRARY_PATH replaces the
	// package's own.
	Plugin string
	// Compiler is neuronx-cc (the environment's bin/, else PATH; "" when
	// missing) and CompilerVersion its package's version.
	Compiler, CompilerVersion string
}

// Major is the libneuronxla major version (0 when unknown).
func (s SDK) Major() int {
	n, _ := strconv.Atoi(strings.SplitN(s.Libneuronxla, ".", 2)[0])
	return n
}

// NeedsPython says whether the plugin calls back into an embedded
// Python to compile: libneuronxla 2.x does; 3.x (Neuron SDK 2.30 and
// later) runs neuronx-cc itself.
func (s SDK) NeedsPython() bool { return s.Major() < 3 }

// String is the one line xladevices, doctor and the bootstrap's debug log
// give for it.
func (s SDK) String() string {
	path := "through an embedded Python (libneuronxla 2.x)"
	if !s.NeedsPython() {
		path = "with no Python in the process (libneuronxla 3.x, Neuron SDK 2.30+)"
	}
	version := s.Libneuronxla
	if version == "" {
		version = "(version unknown)"
	}
	cc := "neuronx-cc missing"
	if s.Compiler != "" {
		cc = "neuronx-cc " + orUnknown(s.CompilerVersion) + " at " + s.Compiler
	}
	return fmt.Sprintf("libneuronxla %s in %s (%s), plugin %s, %s; loaded %s", version, s.SitePackages, s.Where, s.Plugin, cc, path)
}

func orUnknown(v string) string {
	if v == "" {
		return "(version unknown)"
	}
	return v
}

// Distribution names of the packages the SDK is made of.
const (
	distLibneuronxla = "libneuronxla"
	distNeuronxCC    = "neuronx_cc"
	pluginFile       = "libneuronpjrt.so"
)

// sitePlace is one directory Python could import libneuronxla from and
// how the search came to it.
type sitePlace struct {
	dir, where, bin string
}

// FindSDK looks for libneuronxla where a Trainium user installs it, in
// Python's order of precedence: $XLADDP_NEURON_PYTHON's environment, the
// active virtualenv ($VIRTUAL_ENV), $PYTHONPATH, the DLAMI's venvs
// (/opt/aws_neuronx_venv_*), then the system's site-packages. ok is false
// when no place holds the package; searched lists where it looked.
func FindSDK(getenv func(string) string) (sdk SDK, ok bool, searched []string, err error) {
	for _, p := range sitePlaces(getenv) {
		searched = append(searched, p.dir)
		if !isDir(filepath.Join(p.dir, distLibneuronxla)) {
			continue
		}
		sdk, err := sdkIn(p, getenv)
		return sdk, true, searched, err
	}
	return SDK{}, false, searched, nil
}

// sitePlaces lists the candidate site-packages directories, in order.
func sitePlaces(getenv func(string) string) []sitePlace {
	var out []sitePlace
	seen := map[string]bool{}
	add := func(where, bin string, patterns ...string) {
		for _, pattern := range patterns {
			dirs, _ := filepath.Glob(pattern)
			slices.Sort(dirs)
			for _, d := range slices.Backward(dirs) { // the newest Python first
				if !seen[d] {
					seen[d] = true
					out = append(out, sitePlace{dir: d, where: where, bin: bin})
				}
			}
		}
	}
	envRoot := func(where, root string) {
		add(where, filepath.Join(root, "bin"), filepath.Join(root, "lib", "python3*", "site-packages"),
			filepath.Join(root, "lib", "python3*", "dist-packages"), filepath.Join(root, "local", "lib", "python3*", "dist-packages"))
	}
	if py := getenv(EnvPython); py != "" {
		envRoot("$"+EnvPython, filepath.Dir(filepath.Dir(py)))
	}
	if venv := getenv("VIRTUAL_ENV"); venv != "" {
		envRoot("$VIRTUAL_ENV", venv)
	}
	for _, d := range filepath.SplitList(getenv("PYTHONPATH")) {
		if d != "" {
			add("$PYTHONPATH", "", d)
		}
	}
	venvs, _ := filepath.Glob(filepath.Join(dlamiRoot, "aws_neuronx_venv_*"))
	slices.Sort(venvs)
	for _, v := range venvs {
		envRoot("the DLAMI venv "+v, v)
	}
	add("the system's site-packages", "", "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages")
	if home := getenv("HOME"); home != "" {
		add("your user site-packages", "", filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	return out
}

// dlamiRoot is where the Neuron DLAMI puts its venvs.
var dlamiRoot = "/opt"

// sdkIn reads the SDK installed in p.
func sdkIn(p sitePlace, getenv func(string) string) (SDK, error) {
	sdk := SDK{SitePackages: p.dir, Where: p.where, Plugin: filepath.Join(p.dir, distLibneuronxla, pluginFile)}
	if p.bin != "" {
		sdk.Env = filepath.Dir(p.bin)
	}
	version, err := distVersion(p.dir, distLibneuronxla)
	if err != nil {
		return sdk, err
	}
	sdk.Libneuronxla = version
	if v := getenv(EnvLibraryPath); v != "" {
		sdk.Plugin = v
	}
	if sdk.CompilerVersion, err = distVersion(p.dir, distNeuronxCC); err != nil {
		return sdk, err
	}
	for _, dir := range append([]string{p.bin}, filepath.SplitList(getenv("PATH"))...) {
		if cc := filepath.Join(dir, "neuronx-cc"); dir != "" && filepath.IsAbs(dir) && isExecutable(cc) {
			sdk.Compiler = cc
			break
		}
	}
	return sdk, nil
}

// maxMetadata bounds a dist-info METADATA file's header as read: the
// version is in its first lines.
const maxMetadata = 64 << 10

// distVersion is the Version of dist's dist-info in dir ("" when none).
// Two dist-infos of one package (a broken upgrade) are an error naming
// both: Python would import whichever files the last install left.
func distVersion(dir, dist string) (string, error) {
	infos, _ := filepath.Glob(filepath.Join(dir, dist+"-*.dist-info"))
	switch len(infos) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("neuron: %s holds %d installs of %s (%s): a broken upgrade; pip uninstall -y %s, then pip install it once",
			dir, len(infos), dist, strings.Join(baseNames(infos), ", "), strings.ReplaceAll(dist, "_", "-"))
	}
	path := filepath.Join(infos[0], "METADATA")
	f, err := readlimit.OpenRegular(path) // a FIFO there would hang the doctor
	if err != nil {
		return "", fmt.Errorf("neuron: %s: %w: reinstall %s", path, err, strings.ReplaceAll(dist, "_", "-"))
	}
	defer f.Close()
	s := bufio.NewScanner(io.LimitReader(f, maxMetadata))
	for s.Scan() {
		line := s.Text()
		if line == "" {
			break // the headers end at the first blank line
		}
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			v = strings.TrimSpace(v)
			if !validVersion(v) {
				return "", fmt.Errorf("neuron: %s gives the version %q, not a version: reinstall %s", path, v, strings.ReplaceAll(dist, "_", "-"))
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("neuron: %s names no Version in its first %d KiB: reinstall %s", path, maxMetadata>>10, strings.ReplaceAll(dist, "_", "-"))
}

// validVersion accepts PEP 440-ish versions: a digit first, then digits,
// letters, dots, '+', '-' and '_', at most 64 characters.
func validVersion(v string) bool {
	if v == "" || len(v) > 64 || v[0] < '0' || v[0] > '9' {
		return false
	}
	for _, r := range v {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune(".+-_", r)) {
			return false
		}
	}
	return true
}

// VersionLess compares dotted versions numerically ("2.10" > "2.9"); a
// part's trailing letters ("0rc1", "0+abc") are ignored.
func VersionLess(a, b string) bool {
	num := func(part string) int {
		end := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > '9' })
		if end >= 0 {
			part = part[:end]
		}
		n, _ := strconv.Atoi(part)
		return n
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x = num(as[i])
		}
		if i < len(bs) {
			y = num(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}
