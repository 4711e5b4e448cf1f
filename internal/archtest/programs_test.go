package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// programTextRule finds what rewrites a program's text or swaps a
// plugin's PJRT calls: a StableHLO op named in a string (a program read
// as text), the plugin's compile call or API table taken over.
var programTextRule = regexp.MustCompile(`"stablehlo\.[a-z_]+|PJRT_Client_Compile\b|PJRT_Api\s*\*\s*\w+\s*=\s*malloc`)

// TestProgramsBuiltNotRewritten: programs are built whole where they are
// built (custom calls through go-xla's builder, backend/internal/buildhook),
// never rewritten as text or swapped into a plugin's compile: no Go or C
// source but tests names a StableHLO op in a string, the plugin's compile
// call, or copies its API table. The vendored PJRT header is XLA's.
func TestProgramsBuiltNotRewritten(t *testing.T) {
	checked := 0
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(path, "_test.go") || !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".c") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		assert.Empty(t, programTextRule.FindAllString(string(src), -1), "%s rewrites programs or hooks the plugin's compile", path)
		return nil
	}))
	assert.Greater(t, checked, 100, "the walk found the sources")
	for _, planted := range []string{
		"convHead = regexp.MustCompile(`\"stablehlo.convolution\"`)",
		"copy->PJRT_Client_Compile = compile_rewritten;",
		"PJRT_Api* copy = malloc(size);",
	} {
		assert.NotEmpty(t, programTextRule.FindAllString(planted, -1), "the rule finds %q", planted)
	}
}
