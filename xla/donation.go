package xla

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/go-xla/stablehlo"
	"github.com/gomlx/gomlx/core/graph"
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
// XLA a copy. GoMLX v0.26.0 has no API for it; the parameter's StableHLO
// value is reached through the GoMLX node's backend op.
func declareAliases(params []*graph.Node, aliases []int) error {
	for i, j := range aliases {
		if j < 0 || params[i].Shape().IsZeroSize() {
			continue
		}
		v, err := stablehloValue(params[i])
		if err != nil {
			return err
		}
		if v.Attributes == nil {
			v.Attributes = map[string]any{}
		}
		v.Attributes[aliasingAttribute] = int64(j)
	}
	return nil
}

// stablehloValue returns the StableHLO value of a parameter node built on
// GoMLX's XLA backend (graph.Node.outputOps[0].value).
func stablehloValue(n *graph.Node) (*stablehlo.Value, error) {
	ops := reflect.ValueOf(n).Elem().FieldByName("outputOps")
	if !ops.IsValid() || ops.Kind() != reflect.Slice || ops.Len() != 1 {
		return nil, fmt.Errorf("xla: declaring buffer aliasing: GoMLX's graph.Node has no single output op (not GoMLX v0.26.0?)")
	}
	op := ops.Index(0).Elem()
	if op.Kind() != reflect.Pointer || op.IsNil() {
		return nil, fmt.Errorf("xla: declaring buffer aliasing: the parameter's op is a %s, not a backend node", op.Kind())
	}
	field := op.Elem().FieldByName("value")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*stablehlo.Value]() {
		return nil, fmt.Errorf("xla: declaring buffer aliasing: the parameter's op (%s) holds no StableHLO value", op.Type())
	}
	v := *(**stablehlo.Value)(unsafe.Pointer(field.UnsafeAddr()))
	if v == nil {
		return nil, fmt.Errorf("xla: declaring buffer aliasing: the parameter has no StableHLO value")
	}
	return v, nil
}

// errDonated: a buffer given to a compiled step's program was read. The
// rules that decide donation make this unreachable; it guards them.
var errDonated = errors.New("xla: reading a buffer that a compiled step's program took over (donated); " +
	"this is a bug in xladdp's donation rules: please report it, and set XLADDP_DONATE=off meanwhile")
