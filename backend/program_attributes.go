package backend

import (
	"github.com/gomlx/gomlx/core/graph"

	"github.com/xladdp/xladdp/backend/internal/pjrtx"
)

// SetParameterAttribute sets an argument attribute of a GoMLX graph's
// parameter as StableHLO writes it (JAX's donate_argnums sets
// "tf.aliasing_output" so). GoMLX has no API for argument attributes;
// the parameter's StableHLO value is reached through go-xla's.
func SetParameterAttribute(param *graph.Node, name string, value any) error {
	op, err := pjrtx.GraphNodeValue(param)
	if err != nil {
		return err
	}
	v, err := pjrtx.StableHLOValue(op)
	if err != nil {
		return err
	}
	if v.Attributes == nil {
		v.Attributes = map[string]any{}
	}
	v.Attributes[name] = value
	return nil
}
