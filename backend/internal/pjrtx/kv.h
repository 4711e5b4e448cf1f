// The PJRT key-value callbacks (kv.c), served by Go (kv.go).
#ifndef XLADDP_PJRTX_KV_H_
#define XLADDP_PJRTX_KV_H_

#include <stdint.h>
#include "pjrt_c_api.h"

PJRT_Error* pjrtx_kv_get(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* pjrtx_kv_try_get(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* pjrtx_kv_put(PJRT_KeyValuePutCallback_Args* args);

// pjrtx_create_client creates a client of api with the named options and,
// where handle is not 0, the key-value callbacks serving the Go store the
// handle names; on failure it returns a malloc'ed message.
char* pjrtx_create_client(const PJRT_Api* api, const PJRT_NamedValue* options, size_t num_options,
		uintptr_t handle, PJRT_Client** client);

#endif
