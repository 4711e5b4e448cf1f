package pjrtx

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
	gomlxxla "github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/stablehlo"
	xlashapes "github.com/gomlx/go-xla/types/shapes"
)

// ffiAPIVersion is XLA's custom-call API version 4, API_VERSION_TYPED_FFI:
// the handler is an XLA_FFI_Handler and backend_config a dictionary of
// attributes it decodes by name.
const ffiAPIVersion = int32(4)

// literal is an attribute rendered as StableHLO text already; go-xla's
// printer writes any value with a ToStableHLO method as it is.
type literal string

func (l literal) ToStableHLO() string { return string(l) }

// FFICustomCall adds to the function of operands (values of go-xla's
// compute backend) a custom call of XLA's typed FFI to target with the
// attribute dictionary config ("{stride = array<i64: 1, 1>}"), whose
// result has shape out, and returns the result as a backend value.
//
// go-xla v0.4.13's builder has custom calls of API version 2 only
// (stablehlo.CustomCallV2: a status-returning call, backend_config a
// string); the typed FFI needs version 4 and a dictionary. So the call
// is built with CustomCallV2 and its statement's two attributes set. An
// upstream change would give CustomCallV2's caller the API version and
// the backend_config as a rendered attribute (a CustomCall with options).
func FFICustomCall(target, config string, operands []compute.Value, out shapes.Shape) (compute.Value, error) {
	if len(operands) == 0 {
		return nil, errors.New("pjrtx: a custom call needs an operand")
	}
	values := make([]*stablehlo.Value, len(operands))
	for i, o := range operands {
		v, err := StableHLOValue(o)
		if err != nil {
			return nil, fmt.Errorf("pjrtx: custom call %s, operand %d: %w", target, i, err)
		}
		values[i] = v
	}
	out0, err := ffiCustomCall(target, config, values, gomlxxla.ShapeToXLA(out))
	if err != nil {
		return nil, err
	}
	return valueLike(operands[0], out0)
}

// ffiCustomCall is FFICustomCall on go-xla's StableHLO values.
func ffiCustomCall(target, config string, operands []*stablehlo.Value, out xlashapes.Shape) (*stablehlo.Value, error) {
	outs, err := stablehlo.CustomCallV2(target, "", operands, nil, []xlashapes.Shape{out}, nil)
	if err != nil {
		return nil, fmt.Errorf("pjrtx: custom call %s: %w", target, err)
	}
	stmt, err := statementOf(outs[0])
	if err != nil {
		return nil, fmt.Errorf("pjrtx: custom call %s: %w", target, err)
	}
	stmt.Attributes["api_version"] = ffiAPIVersion
	stmt.Attributes["backend_config"] = literal(config)
	return outs[0], nil
}

// statementOf is the statement that made v (stablehlo.Value.stmt).
func statementOf(v *stablehlo.Value) (*stablehlo.Statement, error) {
	field := reflect.ValueOf(v).Elem().FieldByName("stmt")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*stablehlo.Statement]() {
		return nil, fmt.Errorf("%w: go-xla's stablehlo.Value has no stmt *Statement field", ErrIncompatible)
	}
	stmt := (*stablehlo.Statement)(field.UnsafePointer())
	if stmt == nil || stmt.Attributes == nil {
		return nil, errors.New("the custom call's value has no statement with attributes")
	}
	return stmt, nil
}
