// Package buildhook is the compute backend the engine builds its
// programs through: go-xla's, with the convolutions a target runs in its
// own kernels put into the program as custom calls where GoMLX builds
// them (Wrap). Every other op, and the compile, is go-xla's.
//
// It knows which ops it hands to a hook and how GoMLX's functions nest;
// it knows nothing of oneDNN, of PJRT or of what a custom call holds.
package buildhook
