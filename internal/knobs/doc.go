// Package knobs is the table of every XLADDP_* variable a user may set:
// its name, default and meaning (docs/architecture.md's knob table is
// checked against it), and for each the parser the process that reads
// it uses, so that ddprun's doctor refuses exactly what a worker would.
//
// It is plain Go, linked by ddprun as by the workers; it knows nothing of
// what the values drive (devices, transports, compilers).
package knobs
