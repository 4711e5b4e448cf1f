// The compile hook of package pjrtx (compilehook.c, compilehook.go).
#ifndef XLADDP_PJRTX_COMPILEHOOK_H_
#define XLADDP_PJRTX_COMPILEHOOK_H_

#include "pjrt_c_api.h"

// pjrtx_hooked_api returns a copy of api whose PJRT_Client_Compile hands
// each MLIR program to the Go rewriter first; the copy lives for the
// process (go-xla keeps using it). NULL if api is too small to copy.
const PJRT_Api* pjrtx_hooked_api(const PJRT_Api* api);

#endif
