// XLA's typed FFI as the CPU plugin calls a custom call's handler: our own
// spelling of the stable C ABI of xla/ffi/api/c_api.h (API 0.x), the few
// structs a handler reads.
#ifndef XLADDP_ONEDNN_XLA_FFI_H_
#define XLADDP_ONEDNN_XLA_FFI_H_

#include <stddef.h>
#include <stdint.h>

typedef struct xffi_ext {
	size_t struct_size;
	int type;  // 1: the metadata query XLA makes when it registers a handler
	struct xffi_ext* next;
} xffi_ext;

typedef struct {
	size_t struct_size;
	void* extension_start;
	int32_t major, minor;
} xffi_version;

typedef struct {
	size_t struct_size;
	xffi_version api_version;
	uint32_t traits;
	int64_t state_type_id;
} xffi_metadata;

typedef struct {
	xffi_ext base;
	xffi_metadata* metadata;
} xffi_metadata_ext;

enum { XFFI_F32 = 11, XFFI_S64 = 5 };

typedef struct {
	size_t struct_size;
	void* extension_start;
	int dtype;
	void* data;
	int64_t rank;
	int64_t* dims;
} xffi_buffer;

typedef struct {
	size_t struct_size;
	void* extension_start;
	int64_t size;
	int* types;
	void** items;
} xffi_list;

typedef struct {
	const char* ptr;
	size_t len;
} xffi_bytes;

enum { XFFI_ATTR_ARRAY = 1 };

typedef struct {
	int dtype;
	size_t size;
	void* data;
} xffi_array;

typedef struct {
	size_t struct_size;
	void* extension_start;
	int64_t size;
	int* types;
	xffi_bytes** names;
	void** attrs;
} xffi_attrs;

typedef struct xffi_error xffi_error;

typedef struct {
	size_t struct_size;
	void* extension_start;
	const char* message;
	int errc;  // absl's codes: 3 invalid argument, 13 internal
} xffi_error_create_args;

typedef struct {
	size_t struct_size;
	void* extension_start;
	xffi_version api_version;
	const void* internal_api;
	xffi_error* (*error_create)(xffi_error_create_args* args);
} xffi_api;

enum { XFFI_STAGE_EXECUTE = 3 };

typedef struct {
	size_t struct_size;
	xffi_ext* extension_start;
	const xffi_api* api;
	void* ctx;
	int stage;
	xffi_list args;
	xffi_list rets;
	xffi_attrs attrs;
	void* future;
} xffi_call_frame;

#endif
