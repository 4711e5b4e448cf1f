// Shared by the cgo preambles of package pjrtx.
#ifndef XLADDP_PJRTX_ERROR_H_
#define XLADDP_PJRTX_ERROR_H_

#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"

// pjrtx_take_error returns a malloc'ed copy of error's message and destroys error.
static inline char* pjrtx_take_error(const PJRT_Api* api, PJRT_Error* error) {
	PJRT_Error_Message_Args margs;
	memset(&margs, 0, sizeof(margs));
	margs.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
	margs.error = error;
	api->PJRT_Error_Message(&margs);
	char* msg = strndup(margs.message, margs.message_size);
	PJRT_Error_Destroy_Args dargs;
	memset(&dargs, 0, sizeof(dargs));
	dargs.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
	dargs.error = error;
	api->PJRT_Error_Destroy(&dargs);
	return msg;
}

#endif
