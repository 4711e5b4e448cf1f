package ddp

// Flags owns --device, so a program on ddp can open every target: a Trn1
// user runs the same binary as the CPU user (--device neuron). Build with
// -tags noneuron to leave Trainium out.
import _ "github.com/xladdp/xladdp/targets"
