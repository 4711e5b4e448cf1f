package backend

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// EnvPython names the Python interpreter whose site-packages are searched for
// pip-installed plugins (JAX's CUDA plugin, the CPU plugin wheel). Default: python3.
const EnvPython = "XLADDP_PYTHON"

// pythonQueryTimeout bounds the interpreter start; a broken Python must not
// hang Open.
const pythonQueryTimeout = 20 * time.Second

// pythonSitePackagesScript prints every directory Python imports from, so
// virtualenvs, user installs and $PYTHONPATH are all covered.
const pythonSitePackagesScript = `import site, sys
dirs = list(getattr(site, "getsitepackages", lambda: [])())
dirs.append(site.getusersitepackages())
dirs.extend(sys.path)
print("\n".join(d for d in dirs if d))`

// pythonSitePackages asks the interpreter for its import directories.
func pythonSitePackages(ctx context.Context) ([]string, error) {
	python := os.Getenv(EnvPython)
	if python == "" {
		python = "python3"
	}
	if _, err := exec.LookPath(python); err != nil {
		return nil, fmt.Errorf("no %s on PATH (set $%s to the Python that has the plugin installed)", python, EnvPython)
	}
	ctx, cancel := context.WithTimeout(ctx, pythonQueryTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", pythonSitePackagesScript).Output()
	if err != nil {
		return nil, fmt.Errorf("asking %s for its site-packages: %w", python, err)
	}
	seen := map[string]bool{}
	var dirs []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !seen[line] && isDir(line) {
			seen[line] = true
			dirs = append(dirs, line)
		}
	}
	return dirs, nil
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
