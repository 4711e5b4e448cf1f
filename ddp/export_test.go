package ddp

// Unexported functions the external tests (package ddp_test) check
// directly.
var VisibleGPUs = visibleGPUs
