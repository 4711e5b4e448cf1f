#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "pjrtx_error.h"

// Served by kv.go. Each returns 0, or a PJRT error code with a malloc'ed
// message in *msg; the value (get) is malloc'ed, freed by free().
extern int pjrtxKVGet(uintptr_t handle, char* key, size_t key_size, int timeout_ms, char** value, size_t* value_size, char** msg);
extern int pjrtxKVTryGet(uintptr_t handle, char* key, size_t key_size, char** value, size_t* value_size, char** msg);
extern int pjrtxKVPut(uintptr_t handle, char* key, size_t key_size, char* value, size_t value_size, char** msg);

static void free_value(char* value) { free(value); }

// fail turns a code and message into the plugin's own error.
static PJRT_Error* fail(PJRT_CallbackError* callback_error, int code, char* msg) {
	PJRT_Error* err = NULL;
	if (callback_error != NULL && *callback_error != NULL) {
		err = (*callback_error)((PJRT_Error_Code)code, msg, msg != NULL ? strlen(msg) : 0);
	}
	free(msg);
	return err;
}

PJRT_Error* pjrtx_kv_get(PJRT_KeyValueGetCallback_Args* args) {
	char* msg = NULL;
	int code = pjrtxKVGet((uintptr_t)args->user_arg, (char*)args->key, args->key_size, args->timeout_in_ms,
		&args->value, &args->value_size, &msg);
	if (code != 0) {
		return fail(args->callback_error, code, msg);
	}
	args->value_deleter_callback = free_value;
	return NULL;
}

PJRT_Error* pjrtx_kv_try_get(PJRT_KeyValueTryGetCallback_Args* args) {
	char* msg = NULL;
	int code = pjrtxKVTryGet((uintptr_t)args->user_arg, (char*)args->key, args->key_size,
		&args->value, &args->value_size, &msg);
	if (code != 0) {
		return fail(args->callback_error, code, msg);
	}
	args->value_deleter_callback = free_value;
	return NULL;
}

PJRT_Error* pjrtx_kv_put(PJRT_KeyValuePutCallback_Args* args) {
	char* msg = NULL;
	int code = pjrtxKVPut((uintptr_t)args->user_arg, (char*)args->key, args->key_size,
		(char*)args->value, args->value_size, &msg);
	if (code != 0) {
		return fail(args->callback_error, code, msg);
	}
	return NULL;
}

char* pjrtx_create_client(const PJRT_Api* api, const PJRT_NamedValue* options, size_t num_options,
		uintptr_t handle, PJRT_Client** client) {
	PJRT_Client_Create_Args args;
	memset(&args, 0, sizeof(args));
	args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
	args.create_options = options;
	args.num_options = num_options;
	if (handle != 0) {
		args.kv_get_callback = pjrtx_kv_get;
		args.kv_get_user_arg = (void*)handle;
		args.kv_put_callback = pjrtx_kv_put;
		args.kv_put_user_arg = (void*)handle;
		args.kv_try_get_callback = pjrtx_kv_try_get;
		args.kv_try_get_user_arg = (void*)handle;
	}
	PJRT_Error* e = api->PJRT_Client_Create(&args);
	if (e != NULL) {
		return pjrtx_take_error(api, e);
	}
	*client = args.client;
	return NULL;
}
