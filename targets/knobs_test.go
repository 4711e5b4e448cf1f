package targets_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/internal/knobs"
	_ "github.com/xladdp/xladdp/targets"
)

// TestDoctorKnowsEveryTarget: the target names ddprun's doctor accepts
// for $XLADDP_DEVICE (knobs.Targets) are the ones a program linking every
// target registers: each parses, and each registered target is among them.
func TestDoctorKnowsEveryTarget(t *testing.T) {
	for _, name := range knobs.Targets {
		_, err := backend.ParseTarget(name)
		assert.NoError(t, err, name)
	}
	for _, target := range backend.Targets() {
		assert.Contains(t, knobs.Targets, string(target))
	}
}
