package xla

// Every program that runs lazy tensors can open every target: a Trn1 user
// runs the same binary as the CPU user (--device neuron).
import _ "github.com/xladdp/xladdp/targets"
