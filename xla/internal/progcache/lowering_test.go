package progcache

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoweringIdentity(t *testing.T) {
	mod := func(path, version string) *debug.Module { return &debug.Module{Path: path, Version: version} }
	released := []*debug.Module{mod("github.com/gomlx/gomlx", "v0.26.0"), mod("github.com/gomlx/go-xla", "v0.1.4")}
	replaced := mod("github.com/gomlx/go-xla", "v0.1.4")
	replaced.Replace = mod("../fork", "")
	tests := []struct {
		name      string
		info      debug.BuildInfo
		wantExact bool
		want      string
	}{
		{"xladdp as a released dependency", debug.BuildInfo{Main: *mod("example.com/trainer", "(devel)"),
			Deps: append([]*debug.Module{mod("github.com/xladdp/xladdp", "v1.2.0")}, released...)}, true,
			"github.com/xladdp/xladdp@v1.2.0;github.com/gomlx/gomlx@v0.26.0;github.com/gomlx/go-xla@v0.1.4;"},
		{"xladdp under development", debug.BuildInfo{Main: *mod("github.com/xladdp/xladdp", "(devel)"), Deps: released}, false, ""},
		{"replaced go-xla", debug.BuildInfo{Main: *mod("example.com/trainer", ""),
			Deps: []*debug.Module{mod("github.com/xladdp/xladdp", "v1.2.0"), mod("github.com/gomlx/gomlx", "v0.26.0"), replaced}}, false, ""},
		{"test binary without dependencies", debug.BuildInfo{Main: *mod("github.com/xladdp/xladdp", "(devel)")}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, exact := moduleVersions(&tt.info)
			assert.Equal(t, tt.wantExact, exact)
			assert.Equal(t, tt.want, id)
		})
	}
	id := LoweringIdentity()
	require.Regexp(t, `^binary:[0-9a-f]{64}$`, id, "a development build is named by its binary's hash")
	assert.Equal(t, id, LoweringIdentity())
}
