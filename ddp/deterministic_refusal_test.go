package ddp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestDeterministicNeedsADeterministicBackend: on a CPU backend opened
// without backend.Options.Deterministic, ddp.Deterministic is refused,
// saying how to open one, rather than training bits that follow the
// device count.
func TestDeterministicNeedsADeterministicBackend(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	lin, err := nn.NewLinear(e.Device(0), nn.NewRand(1), 3, 2, true)
	require.NoError(t, err)
	_, err = ddp.Wrap(xlatest.Context(t), lin, ddp.Deterministic(8, 4, 1))
	assert.ErrorContains(t, err, "opened without backend.Options.Deterministic")
	assert.ErrorContains(t, err, "XLADDP_DETERMINISTIC=1")
}
