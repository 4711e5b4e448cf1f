package pjrtx

/*
#include "pjrt_c_api.h"
*/
import "C"

// HeaderVersion is the PJRT C API version of the argument structs this
// binary passes to a plugin (go-xla's header and ours are the same).
func HeaderVersion() (major, minor int) { return int(C.PJRT_API_MAJOR), int(C.PJRT_API_MINOR) }
