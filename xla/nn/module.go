package nn

import (
	"fmt"
	"strings"

	"github.com/xladdp/xladdp/xla"
)

// Module is a layer or model.
type Module interface {
	// Forward records the module applied to x.
	Forward(x *xla.Tensor) *xla.Tensor
	// Params returns the module's own parameters (not its children's), in
	// registration order, named as torch names them ("weight", "bias").
	Params() []Named
	// Buffers returns the module's own buffers (BatchNorm's running stats).
	Buffers() []Named
	// Children returns the submodules in registration order.
	Children() []NamedModule
}

// Named is a tensor with its (dotted) name.
type Named struct {
	Name   string
	Tensor *xla.Tensor
}

// NamedModule is a submodule with its attribute name.
type NamedModule struct {
	Name   string
	Module Module
}

// modal is implemented by modules whose behaviour differs in training.
type modal interface{ setTraining(bool) }

// Train puts m and its submodules in training mode (torch's model.train()).
func Train(m Module) { setMode(m, true) }

// Eval puts m and its submodules in evaluation mode (torch's model.eval()).
func Eval(m Module) { setMode(m, false) }

func setMode(m Module, training bool) {
	if mm, ok := m.(modal); ok {
		mm.setTraining(training)
	}
	for _, c := range m.Children() {
		setMode(c.Module, training)
	}
}

// walk visits m and its descendants depth-first with their dotted prefixes.
func walk(m Module, prefix string, visit func(prefix string, m Module)) {
	visit(prefix, m)
	for _, c := range m.Children() {
		walk(c.Module, prefix+c.Name+".", visit)
	}
}

func collect(m Module, own func(Module) []Named) []Named {
	var out []Named
	walk(m, "", func(prefix string, mod Module) {
		for _, n := range own(mod) {
			out = append(out, Named{Name: prefix + n.Name, Tensor: n.Tensor})
		}
	})
	return out
}

// NamedParameters returns every parameter with its full torch name. A
// tensor shared by two modules (a tied embedding and output head) is
// listed once, under its first name, as torch's named_parameters does, so
// an optimizer updates it once with the sum of both uses' gradients.
func NamedParameters(m Module) []Named {
	seen := map[*xla.Tensor]bool{}
	var out []Named
	for _, p := range collect(m, Module.Params) {
		if !seen[p.Tensor] {
			seen[p.Tensor] = true
			out = append(out, p)
		}
	}
	return out
}

// NamedBuffers returns every buffer with its full torch name.
func NamedBuffers(m Module) []Named { return collect(m, Module.Buffers) }

// Parameters returns every parameter tensor (for an optimizer).
func Parameters(m Module) []*xla.Tensor {
	named := NamedParameters(m)
	out := make([]*xla.Tensor, len(named))
	for i, n := range named {
		out[i] = n.Tensor
	}
	return out
}

// NumParameters counts the parameters' elements.
func NumParameters(m Module) int {
	total := 0
	for _, p := range NamedParameters(m) {
		total += p.Tensor.Shape().Size()
	}
	return total
}

// StateDict returns parameters and buffers in torch's state_dict order:
// each module's own parameters, then its buffers, then its children. A
// shared tensor appears under each of its names, as in torch.
func StateDict(m Module) []Named {
	return collect(m, func(mod Module) []Named { return append(mod.Params(), mod.Buffers()...) })
}

// Err returns the first build failure a module of m's tree carries
// (Dense keeps its own), or nil.
func Err(m Module) error {
	var first error
	walk(m, "", func(prefix string, mod Module) {
		if f, ok := mod.(interface{ Err() error }); ok && first == nil {
			if err := f.Err(); err != nil {
				first = err
				if name := strings.TrimSuffix(prefix, "."); name != "" {
					first = fmt.Errorf("%s: %w", name, err)
				}
			}
		}
	})
	return first
}
