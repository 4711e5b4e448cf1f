// Package targets links every device target xladdp has, for programs
// that want them all (the examples, xladevices, every program on package
// xla): cpu and cuda, which package backend provides itself, and neuron
// (Trainium), which package neuron registers. A program that wants fewer
// imports backend and only the target packages it needs.
package targets
