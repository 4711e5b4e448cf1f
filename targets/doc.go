// Package targets links every device target xladdp has, for programs
// that want them all (ddp, whose Flags own --device, and so the examples;
// xladevices): cpu and cuda, which package backend provides itself, and
// neuron (Trainium), which package neuron registers unless the program is
// built with -tags noneuron (no cgo bootstrap, no embedded Python). The
// engine (package xla) links none: a program on xla alone imports
// backend's cpu and cuda, and the target packages it wants, as with
// image.RegisterFormat.
package targets
