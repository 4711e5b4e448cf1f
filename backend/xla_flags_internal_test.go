package backend

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeterministicRefusesRoundingFlags: in deterministic mode an
// XLA_FLAGS that turns on fast math (or drops its NaN, infinity, division
// or function handling), fast min/max, or gives a flag twice is refused,
// naming the flag; other flags pass.
func TestDeterministicRefusesRoundingFlags(t *testing.T) {
	for _, tc := range []struct{ flags, want string }{
		{"", ""},
		{"--xla_cpu_enable_fast_math=false --xla_dump_to=/tmp/x", ""},
		{"--xla_cpu_enable_fast_math=true", "sets --xla_cpu_enable_fast_math=true"},
		{"--xla_cpu_enable_fast_math", "sets --xla_cpu_enable_fast_math=true"},
		{"--xla_cpu_fast_math_honor_nans=false", "sets --xla_cpu_fast_math_honor_nans=false"},
		{"--xla_cpu_enable_fast_min_max=TRUE", "sets --xla_cpu_enable_fast_min_max=TRUE"},
		{"--xla_gpu_enable_fast_min_max=true", "sets --xla_gpu_enable_fast_min_max=true"},
		{"--xla_cpu_experimental_ynn_fusion_type=dot --xla_cpu_experimental_ynn_fusion_type=dot,reduce",
			"gives --xla_cpu_experimental_ynn_fusion_type twice (dot, then dot,reduce)"},
	} {
		t.Setenv(EnvXLAFlags, tc.flags)
		err := checkDeterministicXLAFlags()
		if tc.want == "" {
			assert.NoError(t, err, tc.flags)
			continue
		}
		assert.ErrorIs(t, err, ErrBadOption, tc.flags)
		assert.ErrorContains(t, err, tc.want, tc.flags)
	}
}

// TestDeterministicDocsListTheRefusedFlags: docs/deterministic.md names
// every flag the mode refuses.
func TestDeterministicDocsListTheRefusedFlags(t *testing.T) {
	doc, err := os.ReadFile("../docs/deterministic.md")
	require.NoError(t, err)
	for _, name := range roundingFlagNames() {
		assert.Contains(t, string(doc), "--"+name, "docs/deterministic.md")
	}
}
