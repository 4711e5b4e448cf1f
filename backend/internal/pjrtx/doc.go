// Package pjrtx reaches the PJRT facts that go-xla v0.1.4 and GoMLX v0.26.0
// do not expose: the *pjrt.Client inside a GoMLX XLA backend, and a device's
// global id and vendor kind string ("cpu", "NVIDIA H100 80GB HBM3", ...).
// It also registers XLA FFI handlers through the plugin's FFI extension
// (ffi.go) and hooks the plugin's compile so that a program can be
// rewritten before the plugin compiles it (compilehook.go): GoMLX builds
// and compiles in one call, and go-xla has no custom-call op.
//
// The kind and id come from the plugin's own function table, reached through
// the library go-xla already loaded (dlopen with RTLD_NOLOAD, so no second
// copy is mapped). pjrt_c_api.h is XLA's header exactly as go-xla v0.1.4
// vendors it (API 0.83); plugins accept callers built against an older header.
//
// The two unexported fields read here are pinned by tests, so an upgrade of
// either dependency that renames them fails loudly instead of reading garbage.
package pjrtx
