// Package onednn runs the CPU target's 2-D convolutions (forward, input
// gradient, weight gradient) through oneDNN 2.x from inside the compiled
// XLA program: typed XLA FFI handlers (conv.c) that the PJRT CPU plugin
// calls from custom calls, and Rewrite, which turns the matching
// stablehlo.convolution ops of a program into those custom calls.
//
// oneDNN is dlopen'ed (libdnnl.so.2, Debian's libdnnl2), never linked: the
// module builds and runs where it is absent, and convolutions then stay
// XLA's. Activations stay in the program's channels-last layout; the
// weights are reordered per call into the blocked layout oneDNN's AVX-512
// kernels want, which measured 1.2–2× XLA's own convolutions on one core
// (docs/BENCHMARKS.md).
//
// It knows nothing of PJRT plugins or go-xla (package pjrtx registers the
// handlers and hooks the compile), nor of the tensors that build programs.
package onednn
