package reduce

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOp(t *testing.T) {
	for op, name := range map[Op]string{Sum: "SUM", Avg: "AVG", Min: "MIN", Max: "MAX", Product: "PRODUCT"} {
		assert.Equal(t, name, op.String())
		assert.True(t, op.Valid())
	}
	for _, bad := range []Op{0, -1, Product + 1, 1 << 40} {
		assert.False(t, bad.Valid(), "%d", int(bad))
		assert.Contains(t, bad.String(), "reduce.Op(")
	}
}
