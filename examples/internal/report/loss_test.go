package report

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLossSaysWhenNoStepMeasuredOne(t *testing.T) {
	assert.Equal(t, "0.0000", Loss(0, true), "a measured 0 is a loss")
	assert.Equal(t, "2.3026", Loss(2.30258, true))
	assert.Contains(t, Loss(0, false), "none", "no step ran: no loss, not 0")
}
