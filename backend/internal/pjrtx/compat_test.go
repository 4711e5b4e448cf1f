package pjrtx

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompatibleWithThePinnedVersions: go.mod requires exactly the versions
// this package reads the internals of, so binaries of this module pass.
func TestCompatibleWithThePinnedVersions(t *testing.T) {
	require.NoError(t, Compatible())
	goMod, err := os.ReadFile("../../../go.mod")
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`(?m)^\s*github.com/gomlx/go-xla `+regexp.QuoteMeta(pinnedGoXLA)+`$`), string(goMod))
	assert.Regexp(t, regexp.MustCompile(`(?m)^\s*github.com/gomlx/gomlx `+regexp.QuoteMeta(pinnedGoMLX)+`$`), string(goMod))
	assert.NotContains(t, string(goMod), "replace github.com/gomlx")
}

func TestCheckVersions(t *testing.T) {
	goxla := func(v string) *debug.Module { return &debug.Module{Path: "github.com/gomlx/go-xla", Version: v} }
	gomlx := func(v string) *debug.Module { return &debug.Module{Path: "github.com/gomlx/gomlx", Version: v} }
	replaced := goxla(pinnedGoXLA)
	replaced.Replace = &debug.Module{Path: "../go-xla-fork"}
	tests := []struct {
		name string
		deps []*debug.Module
		want string
	}{
		{"pinned", []*debug.Module{goxla(pinnedGoXLA), gomlx(pinnedGoMLX)}, ""},
		{"newer go-xla", []*debug.Module{goxla("v0.4.14"), gomlx(pinnedGoMLX)}, "github.com/gomlx/go-xla is v0.4.14 but xladdp runs programs through its internals as of v0.4.13"},
		{"older GoMLX", []*debug.Module{goxla(pinnedGoXLA), gomlx("v0.28.15")}, "github.com/gomlx/gomlx is v0.28.15"},
		{"replaced", []*debug.Module{replaced, gomlx(pinnedGoMLX)}, "github.com/gomlx/go-xla is v0.4.13 => ../go-xla-fork, but xladdp runs programs through its internals as of v0.4.13, unreplaced: drop the replace (go mod edit -dropreplace=github.com/gomlx/go-xla)"},
		{"missing", []*debug.Module{gomlx(pinnedGoMLX)}, "github.com/gomlx/go-xla@v0.4.13 is not in the binary's build information"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkVersions(tt.deps)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrIncompatible)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
