package examples

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryDocGoIsOnePackageComment: each package's doc.go is its package
// comment, whole: a blank line inside it (xla's did) detaches what
// follows, which `go doc` then drops.
func TestEveryDocGoIsOnePackageComment(t *testing.T) {
	var docs []string
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.Name() == "doc.go" {
			docs = append(docs, path)
		}
		return nil
	}))
	require.GreaterOrEqual(t, len(docs), 10, "doc.go files found: %v", docs)
	for _, path := range docs {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		require.NoError(t, err, path)
		require.NotNil(t, f.Doc, "%s has no package comment", path)
		assert.Len(t, f.Comments, 1, "%s: a comment detached from the package comment (a blank line without //?)", path)
	}
}

// TestReadmeShowsTheToyInFull: the README's toy is examples/toy/main.go,
// byte for byte, and the README stays a front page.
func TestReadmeShowsTheToyInFull(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	toy, err := os.ReadFile("toy/main.go")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "```go\n"+string(toy)+"```\n")
	assert.LessOrEqual(t, strings.Count(string(readme), "\n"), 200, "the README is a front page: the reference lives in docs/")
}

// TestMakeDepsChecksGo: a new user whose Go is installed but not on PATH
// (the Go tarball's /usr/local/go/bin) is told so by make deps, with the
// line that fixes it, instead of "go: command not found" after the other
// downloads; a Go older than go.mod's is refused with the version wanted.
func TestMakeDepsChecksGo(t *testing.T) {
	out, err := exec.Command("make", "-s", "-C", "..", "deps-go").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "deps: Go ")

	cmd := exec.Command("make", "-s", "-C", "..", "deps-go")
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin", "HOME="+t.TempDir())
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	// The go command on a test's PATH may be the toolchain GOTOOLCHAIN
	// fetched; make looks where a user's Go is installed.
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		assert.Contains(t, string(out), `go is not on PATH, but /usr/local/go/bin/go is: export PATH="$PATH:/usr/local/go/bin"`)
	} else {
		assert.Contains(t, string(out), "go not found: install Go")
	}

	// Where this machine's Go is older than go.mod's, the user's Go
	// settings get the toolchain once, so a plain go command works too.
	// go test puts the toolchain it runs on PATH first: the user's Go is
	// the one installed (/usr/local/go), where there is one.
	path := os.Getenv("PATH")
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		path = "/usr/local/go/bin:" + path
	}
	settings := filepath.Join(t.TempDir(), "goenv")
	setting := exec.Command("make", "-s", "-C", "..", "deps-go")
	setting.Env = append(os.Environ(), "GOENV="+settings, "PATH="+path)
	out, err = setting.CombinedOutput()
	require.NoError(t, err, "%s", out)
	own, err := exec.Command("sh", "-c", "cd / && PATH="+path+" GOTOOLCHAIN=local go env GOVERSION").Output()
	require.NoError(t, err)
	if strings.TrimSpace(string(own)) < "go1.27" {
		assert.Contains(t, string(out), "deps: set GOTOOLCHAIN=go1.27.3+auto in "+settings)
		saved, err := os.ReadFile(settings)
		require.NoError(t, err)
		assert.Contains(t, string(saved), "GOTOOLCHAIN=go1.27.3+auto")
		again := exec.Command("make", "-s", "-C", "..", "deps-go")
		again.Env = setting.Env
		out, err = again.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	assert.NotContains(t, string(out), "deps: set GOTOOLCHAIN", "set once, and never where the machine's Go is new enough")

	out, err = exec.Command("make", "-s", "-C", "..", "deps-go", "GO_WANT=99.0").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "this module needs Go 99.0 or later")
}
