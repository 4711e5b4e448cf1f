//go:build !noneuron

package targets

// Linked, package neuron registers the neuron target with package backend.
// Build with -tags noneuron to leave it (and its cgo bootstrap) out.
import _ "github.com/xladdp/xladdp/neuron"
