package xla

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// aliasingAttribute is the StableHLO argument attribute XLA reads as
// input_output_alias (JAX's donate_argnums sets it the same way): the
// argument's buffer may hold that output when the caller donates it.
const aliasingAttribute = "tf.aliasing_output"

// declareAliases pairs each output with a parameter of the same shape
// (first free one, in order) and declares the pair to XLA, so a donated
// parameter's memory holds the output: a step that updates parameters and
// optimizer state needs no second copy of them. The declaration is "may
// alias": an input that is not donated at run time is left alone, so the
// program serves lazy steps (which donate nothing) too. GoMLX v0.26.0
// has no API for it; the parameter's StableHLO value is reached through
// the GoMLX node's backend op.
func declareAliases(params, outputs []*graph.Node) error {
	used := make([]bool, len(params))
	for j, out := range outputs {
		for i, p := range params {
			if used[i] || p.Shape().IsZeroSize() || !p.Shape().Equal(out.Shape()) {
				continue
			}
			v, err := stablehloValue(p)
			if err != nil {
				return err
			}
			if v.Attributes == nil {
				v.Attributes = map[string]any{}
			}
			v.Attributes[aliasingAttribute] = int64(j)
			used[i] = true
			break
		}
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
