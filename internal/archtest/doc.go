// Package archtest holds the architecture's fitness rules as tests: what
// each layer may link (the engine no target, the process group no PJRT,
// the launcher no cgo, ddp not the launcher), where names are spelled
// (worker variables in internal/workerenv, Neuron's in neuron/trn), where
// commands live, and how big files and the ddp root may grow. The map
// they keep true is docs/architecture.md. It has no code of its own.
package archtest
