// Package pjrtx is the one seam onto the internals of go-xla (v0.4.13)
// and GoMLX (v0.28.16) that xladdp relies on, and onto the PJRT C API
// they do not wrap: go-xla's client and compute backend created here, with
// the key-value callbacks (client_create.go, kv.go);
// GoMLX buffers made from and read as PJRT buffers (the engine runs
// programs through PJRT itself: Execute, asynchronously, with donation);
// executables serialized and loaded (the persistent compile cache); a
// device's global id and vendor kind string ("cpu", "NVIDIA H100 80GB
// HBM3", ...); a parameter's StableHLO value (argument attributes); XLA
// FFI handlers registered through the plugin's FFI extension (ffi.go);
// and typed-FFI custom calls (API version 4) built into a program with
// go-xla's StableHLO builder, which has version 2 only (customcall.go).
//
// Every unexported field it reads or writes is found by name and type
// once, after Compatible checked that the binary links the pinned
// versions; tests pin each one, and a golden test
// (testdata/ffi_custom_call.mlir) the custom call as go-xla prints it, so
// an upgrade fails loudly instead of reading garbage or compiling a
// program wrong. No program text is rewritten and no API table swapped.
//
// pjrt_c_api.h is XLA's header exactly as go-xla v0.4.13 vendors it (API
// 0.104); plugins accept callers built against an older header.
package pjrtx
