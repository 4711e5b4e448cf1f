package xla

// Every program that runs lazy tensors can open every target: the neuron
// target's bootstrap registers itself with package backend when linked, and
// a Trn1 user runs the same binary as the CPU user (--device neuron).
import _ "github.com/xladdp/xladdp/neuron"
