// The part of oneDNN 2.x's C API (libdnnl.so.2: Debian's libdnnl2 2.6.3,
// PyTorch 1.13's) the convolution handlers call, spelled here so that the
// module builds where oneDNN is not installed; the library is dlopen'ed.
// abi_test.go checks every value against the installed dnnl.h.
#ifndef XLADDP_ONEDNN_DNNL_ABI_H_
#define XLADDP_ONEDNN_DNNL_ABI_H_

#include <stddef.h>
#include <stdint.h>

typedef int xd_status;  // dnnl_status_t: 0 is success
typedef struct xd_engine* xd_engine;
typedef struct xd_stream* xd_stream;
typedef struct xd_primitive_desc* xd_pd;
typedef struct xd_primitive* xd_primitive;
typedef struct xd_memory* xd_memory;
typedef struct xd_attr* xd_attr;
typedef int64_t xd_dims[12];  // DNNL_MAX_NDIMS

// dnnl_memory_desc_t and dnnl_convolution_desc_t are values the library
// fills (696 and 5976 bytes in 2.6); these blobs hold either with room.
typedef struct {
	_Alignas(16) unsigned char bytes[1024];
} xd_md;
typedef struct {
	_Alignas(16) unsigned char bytes[8192];
} xd_conv_desc;

typedef struct {
	int arg;
	xd_memory memory;
} xd_exec_arg;

typedef struct {
	int major, minor, patch;
	const char* hash;
	unsigned cpu_runtime, gpu_runtime;
} xd_version;

enum {
	XD_SUCCESS = 0,
	XD_F32 = 3,
	XD_TAG_ANY = 1,
	XD_TAG_ACDB = 20,  // nhwc
	XD_TAG_CDBA = 30,  // hwio
	XD_FORWARD_TRAINING = 64,
	XD_BACKWARD_DATA = 160,
	XD_BACKWARD_WEIGHTS = 192,
	XD_CONVOLUTION_DIRECT = 1,
	XD_ENGINE_CPU = 1,
	XD_QUERY_SRC_MD = 129,
	XD_QUERY_DIFF_SRC_MD = 130,
	XD_QUERY_WEIGHTS_MD = 131,
	XD_QUERY_DIFF_WEIGHTS_MD = 132,
	XD_QUERY_DST_MD = 133,
	XD_QUERY_DIFF_DST_MD = 134,
	XD_QUERY_SCRATCHPAD_MD = 136,
	XD_SCRATCHPAD_USER = 1,
	XD_STREAM_DEFAULT = 1,
	XD_ARG_SRC = 1,
	XD_ARG_DST = 17,
	XD_ARG_WEIGHTS = 33,
	XD_ARG_SCRATCHPAD = 80,
	XD_ARG_DIFF_SRC = 129,
	XD_ARG_DIFF_DST = 145,
	XD_ARG_DIFF_WEIGHTS = 161,
	XD_ARG_FROM = 1,
	XD_ARG_TO = 17,
};

// The library's functions, by the names dlsym finds.
typedef struct {
	const xd_version* (*version)(void);
	xd_status (*engine_create)(xd_engine*, int kind, size_t index);
	xd_status (*stream_create)(xd_stream*, xd_engine, unsigned flags);
	xd_status (*stream_wait)(xd_stream);
	xd_status (*stream_destroy)(xd_stream);
	xd_status (*memory_desc_init_by_tag)(xd_md*, int ndims, const xd_dims dims, int data_type, int tag);
	size_t (*memory_desc_get_size)(const xd_md*);
	int (*memory_desc_equal)(const xd_md*, const xd_md*);
	xd_status (*memory_create)(xd_memory*, const xd_md*, xd_engine, void* handle);
	xd_status (*memory_destroy)(xd_memory);
	xd_status (*primitive_attr_create)(xd_attr*);
	xd_status (*primitive_attr_set_scratchpad_mode)(xd_attr, int mode);
	xd_status (*primitive_attr_destroy)(xd_attr);
	xd_status (*convolution_forward_desc_init)(xd_conv_desc*, int prop, int alg, const xd_md* src, const xd_md* weights,
		const xd_md* bias, const xd_md* dst, const xd_dims strides, const xd_dims padding_l, const xd_dims padding_r);
	xd_status (*convolution_backward_data_desc_init)(xd_conv_desc*, int alg, const xd_md* diff_src, const xd_md* weights,
		const xd_md* diff_dst, const xd_dims strides, const xd_dims padding_l, const xd_dims padding_r);
	xd_status (*convolution_backward_weights_desc_init)(xd_conv_desc*, int alg, const xd_md* src, const xd_md* diff_weights,
		const xd_md* diff_bias, const xd_md* diff_dst, const xd_dims strides, const xd_dims padding_l, const xd_dims padding_r);
	xd_status (*primitive_desc_create)(xd_pd*, const void* op_desc, xd_attr, xd_engine, xd_pd hint);
	const xd_md* (*primitive_desc_query_md)(xd_pd, int what, int index);
	xd_status (*primitive_desc_destroy)(xd_pd);
	xd_status (*reorder_primitive_desc_create)(xd_pd*, const xd_md* src, xd_engine, const xd_md* dst, xd_engine, xd_attr);
	xd_status (*primitive_create)(xd_primitive*, xd_pd);
	xd_status (*primitive_execute)(xd_primitive, xd_stream, int nargs, const xd_exec_arg* args);
	xd_status (*primitive_destroy)(xd_primitive);
} xd_lib;

// The dlsym names of xd_lib's fields, in order.
#define XD_LIB_SYMBOLS                                                                                                 \
	"dnnl_version", "dnnl_engine_create", "dnnl_stream_create", "dnnl_stream_wait", "dnnl_stream_destroy",             \
	    "dnnl_memory_desc_init_by_tag", "dnnl_memory_desc_get_size", "dnnl_memory_desc_equal", "dnnl_memory_create",  \
	    "dnnl_memory_destroy", "dnnl_primitive_attr_create", "dnnl_primitive_attr_set_scratchpad_mode",                \
	    "dnnl_primitive_attr_destroy", "dnnl_convolution_forward_desc_init", "dnnl_convolution_backward_data_desc_init", \
	    "dnnl_convolution_backward_weights_desc_init", "dnnl_primitive_desc_create", "dnnl_primitive_desc_query_md",   \
	    "dnnl_primitive_desc_destroy", "dnnl_reorder_primitive_desc_create", "dnnl_primitive_create",                  \
	    "dnnl_primitive_execute", "dnnl_primitive_destroy"

#endif
