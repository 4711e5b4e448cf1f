package targets

// Linked, package neuron registers the neuron target with package backend.
import _ "github.com/xladdp/xladdp/neuron"
