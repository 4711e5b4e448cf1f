package xla

import (
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/core/graph"

	"github.com/xladdp/xladdp/backend"
)

// aliasingAttribute is the StableHLO argument attribute XLA reads as
// input_output_alias (JAX's donate_argnums sets it the same way): the
// argument's buffer may hold that output when the caller donates it.
const aliasingAttribute = "tf.aliasing_output"

// declareAliases declares to XLA that parameter i's buffer may hold
// output aliases[i] when the caller donates it, so a step that updates
// parameters and optimizer state in place needs no second copy of them.
// It is declared only for a parameter the step overwrites: a declared
// parameter that other ops still read after the output is written costs
// XLA a copy. GoMLX has no API for it (backend.SetParameterAttribute).
func declareAliases(params []*graph.Node, aliases []int) error {
	for i, j := range aliases {
		if j < 0 || params[i].Shape().IsZeroSize() {
			continue
		}
		if err := backend.SetParameterAttribute(params[i], aliasingAttribute, int64(j)); err != nil {
			return fmt.Errorf("xla: declaring buffer aliasing: %w", err)
		}
	}
	return nil
}

// errDonated: a buffer given to a compiled step's program was read. The
// rules that decide donation make this unreachable; it guards them.
var errDonated = errors.New("xla: reading a buffer that a compiled step's program took over (donated); " +
	"this is a bug in xladdp's donation rules: please report it, and set XLADDP_DONATE=off meanwhile")
