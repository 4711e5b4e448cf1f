#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conv.h"
#include "dnnl_abi.h"
#include "xla_ffi.h"

static xd_lib dnnl;
static xd_engine engine;

// OpenMP's thread count for a convolution (0: OpenMP's default), set on
// each calling thread: oneDNN 2.x in Debian runs on libgomp.
static int threads, default_threads;
static void (*omp_set_num_threads_fn)(int);

void onednn_set_threads(int n) { __atomic_store_n(&threads, n, __ATOMIC_RELAXED); }

int onednn_load(const char* path, char** version, char** err) {
	void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char* msg = dlerror();
		*err = strdup(msg ? msg : "dlopen failed");
		return 1;
	}
	static const char* names[] = {XD_LIB_SYMBOLS};
	void** slots = (void**)&dnnl;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		slots[i] = dlsym(lib, names[i]);
		if (slots[i] == NULL) {
			char buf[256];
			snprintf(buf, sizeof(buf), "%s has no %s: not oneDNN 2.x's C API", path, names[i]);
			*err = strdup(buf);
			return 1;
		}
	}
	omp_set_num_threads_fn = (void (*)(int))dlsym(lib, "omp_set_num_threads");
	int (*omp_get_max_threads_fn)(void) = (int (*)(void))dlsym(lib, "omp_get_max_threads");
	default_threads = omp_get_max_threads_fn != NULL ? omp_get_max_threads_fn() : 0;
	const xd_version* v = dnnl.version();
	char buf[64];
	snprintf(buf, sizeof(buf), "%d.%d.%d", v->major, v->minor, v->patch);
	*version = strdup(buf);
	if (v->major != 2) {
		*err = strdup("the convolution handlers speak oneDNN 2.x's C API");
		return 1;
	}
	if (dnnl.engine_create(&engine, XD_ENGINE_CPU, 0) != XD_SUCCESS) {
		*err = strdup("oneDNN could not create its CPU engine");
		return 1;
	}
	return 0;
}

enum pass { FORWARD, INPUT_GRAD, WEIGHT_GRAD };

// A convolution's geometry, logical (NCHW/OIHW) as oneDNN counts.
typedef struct {
	int pass;
	// The OpenMP threads the primitive is made for and runs on: oneDNN
	// splits its work (and so its sums) by the count at creation.
	int threads;
	int64_t n, c, h, w, o, kh, kw, oh, ow;
	int64_t stride[2], pad_lo[2], pad_hi[2];
} geometry;

// A primitive made once per geometry, with the weight reorder between
// the program's HWIO and the layout oneDNN chose (none when they agree).
typedef struct plan {
	geometry g;
	xd_primitive conv, reorder;
	xd_md act_in, act_out;  // the activations as the program holds them (NHWC)
	xd_md user_weights;     // HWIO
	xd_md weights;          // the primitive's
	size_t weights_bytes, scratch_bytes;
	struct plan* next;
} plan;

static unsigned long long call_count[3], call_ns[3], call_flop[3];  // by pass

void onednn_calls(int pass, unsigned long long* count, unsigned long long* ns, unsigned long long* flop) {
	*count = __atomic_load_n(&call_count[pass], __ATOMIC_RELAXED);
	*ns = __atomic_load_n(&call_ns[pass], __ATOMIC_RELAXED);
	*flop = __atomic_load_n(&call_flop[pass], __ATOMIC_RELAXED);
}

static unsigned long long now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static pthread_mutex_t plans_mu = PTHREAD_MUTEX_INITIALIZER;
static plan* plans;

static xffi_error* fail(xffi_call_frame* f, int code, const char* msg) {
	xffi_error_create_args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = sizeof(a);
	a.message = msg;
	a.errc = code;
	return f->api->error_create(&a);
}

static void init_md(xd_md* md, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int tag, xd_status* st) {
	xd_dims dims = {d0, d1, d2, d3};
	if (*st == XD_SUCCESS) {
		*st = dnnl.memory_desc_init_by_tag(md, 4, dims, XD_F32, tag);
	}
}

// make_plan builds g's primitive; NULL and *why on failure.
static plan* make_plan(const geometry* g, const char** why) {
	plan* p = calloc(1, sizeof(plan));
	xd_status st = XD_SUCCESS;
	xd_md src, dst, any_weights;
	init_md(&src, g->n, g->c, g->h, g->w, XD_TAG_ACDB, &st);
	init_md(&dst, g->n, g->o, g->oh, g->ow, XD_TAG_ACDB, &st);
	init_md(&any_weights, g->o, g->c, g->kh, g->kw, XD_TAG_ANY, &st);
	init_md(&p->user_weights, g->o, g->c, g->kh, g->kw, XD_TAG_CDBA, &st);
	xd_dims strides = {g->stride[0], g->stride[1]}, lo = {g->pad_lo[0], g->pad_lo[1]}, hi = {g->pad_hi[0], g->pad_hi[1]};
	xd_attr attr = NULL;
	if (st == XD_SUCCESS) st = dnnl.primitive_attr_create(&attr);
	if (st == XD_SUCCESS) st = dnnl.primitive_attr_set_scratchpad_mode(attr, XD_SCRATCHPAD_USER);
	xd_conv_desc fwd_desc, desc;
	xd_pd fwd_pd = NULL, pd = NULL, reorder_pd = NULL;
	if (st == XD_SUCCESS)
		st = dnnl.convolution_forward_desc_init(&fwd_desc, XD_FORWARD_TRAINING, XD_CONVOLUTION_DIRECT, &src, &any_weights, NULL, &dst,
			strides, lo, hi);
	if (st == XD_SUCCESS) st = dnnl.primitive_desc_create(&fwd_pd, &fwd_desc, attr, engine, NULL);
	int weights_query = XD_QUERY_WEIGHTS_MD;
	switch (g->pass) {
	case FORWARD:
		pd = fwd_pd;
		fwd_pd = NULL;
		p->act_in = src;
		p->act_out = dst;
		break;
	case INPUT_GRAD:
		if (st == XD_SUCCESS)
			st = dnnl.convolution_backward_data_desc_init(&desc, XD_CONVOLUTION_DIRECT, &src, &any_weights, &dst, strides, lo, hi);
		if (st == XD_SUCCESS) st = dnnl.primitive_desc_create(&pd, &desc, attr, engine, fwd_pd);
		p->act_in = dst;
		p->act_out = src;
		break;
	case WEIGHT_GRAD:
		if (st == XD_SUCCESS)
			st = dnnl.convolution_backward_weights_desc_init(&desc, XD_CONVOLUTION_DIRECT, &src, &any_weights, NULL, &dst, strides, lo,
				hi);
		if (st == XD_SUCCESS) st = dnnl.primitive_desc_create(&pd, &desc, attr, engine, fwd_pd);
		weights_query = XD_QUERY_DIFF_WEIGHTS_MD;
		p->act_in = src;
		p->act_out = dst;
		break;
	}
	if (st == XD_SUCCESS) {
		memcpy(&p->weights, dnnl.primitive_desc_query_md(pd, weights_query, 0), sizeof(xd_md));
		p->weights_bytes = dnnl.memory_desc_get_size(&p->weights);
		const xd_md* scratch = dnnl.primitive_desc_query_md(pd, XD_QUERY_SCRATCHPAD_MD, 0);
		p->scratch_bytes = scratch ? dnnl.memory_desc_get_size(scratch) : 0;
		st = dnnl.primitive_create(&p->conv, pd);
	}
	if (st == XD_SUCCESS && !dnnl.memory_desc_equal(&p->weights, &p->user_weights)) {
		if (g->pass == WEIGHT_GRAD) {
			st = dnnl.reorder_primitive_desc_create(&reorder_pd, &p->weights, engine, &p->user_weights, engine, NULL);
		} else {
			st = dnnl.reorder_primitive_desc_create(&reorder_pd, &p->user_weights, engine, &p->weights, engine, NULL);
		}
		if (st == XD_SUCCESS) st = dnnl.primitive_create(&p->reorder, reorder_pd);
	}
	if (reorder_pd) dnnl.primitive_desc_destroy(reorder_pd);
	if (pd) dnnl.primitive_desc_destroy(pd);
	if (fwd_pd) dnnl.primitive_desc_destroy(fwd_pd);
	if (attr) dnnl.primitive_attr_destroy(attr);
	if (st != XD_SUCCESS) {
		*why = "oneDNN refused the convolution";
		free(p);
		return NULL;
	}
	p->g = *g;
	return p;
}

static plan* find_plan(const geometry* g, const char** why) {
	pthread_mutex_lock(&plans_mu);
	plan* p = plans;
	while (p != NULL && memcmp(&p->g, g, sizeof(geometry)) != 0) {
		p = p->next;
	}
	if (p == NULL && (p = make_plan(g, why)) != NULL) {
		p->next = plans;
		plans = p;
	}
	pthread_mutex_unlock(&plans_mu);
	return p;
}

// A stream per thread: XLA may run two replicas' programs at once.
static __thread xd_stream thread_stream;

static int run(plan* p, void* act_in, void* weights_or_act, void* out) {
	if (thread_stream == NULL && dnnl.stream_create(&thread_stream, engine, XD_STREAM_DEFAULT) != XD_SUCCESS) {
		return 1;
	}
	xd_memory m[6] = {0};
	void* blocked = NULL;
	void* scratch = NULL;
	xd_status st = XD_SUCCESS;
	if (p->reorder) blocked = aligned_alloc(64, (p->weights_bytes + 63) / 64 * 64);
	if (p->scratch_bytes) scratch = aligned_alloc(64, (p->scratch_bytes + 63) / 64 * 64);
	if ((p->reorder && blocked == NULL) || (p->scratch_bytes && scratch == NULL)) st = 1;
	xd_md scratch_md;
	if (st == XD_SUCCESS && p->scratch_bytes) init_md(&scratch_md, (int64_t)(p->scratch_bytes / 4 + 1), 1, 1, 1, XD_TAG_ACDB, &st);
	xd_exec_arg args[4];
	int n = 0;
	switch (p->g.pass) {
	case FORWARD:
	case INPUT_GRAD: {
		// weights_or_act is the program's HWIO weights.
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[0], &p->user_weights, engine, weights_or_act);
		if (st == XD_SUCCESS && p->reorder) {
			st = dnnl.memory_create(&m[1], &p->weights, engine, blocked);
			xd_exec_arg r[2] = {{XD_ARG_FROM, m[0]}, {XD_ARG_TO, m[1]}};
			if (st == XD_SUCCESS) st = dnnl.primitive_execute(p->reorder, thread_stream, 2, r);
		}
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[2], &p->act_in, engine, act_in);
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[3], &p->act_out, engine, out);
		int fwd = p->g.pass == FORWARD;
		args[n++] = (xd_exec_arg){fwd ? XD_ARG_SRC : XD_ARG_DIFF_DST, m[2]};
		args[n++] = (xd_exec_arg){XD_ARG_WEIGHTS, p->reorder ? m[1] : m[0]};
		args[n++] = (xd_exec_arg){fwd ? XD_ARG_DST : XD_ARG_DIFF_SRC, m[3]};
		break;
	}
	case WEIGHT_GRAD:
		// act_in is x, weights_or_act is dy, out the HWIO weight gradient.
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[0], &p->user_weights, engine, out);
		if (st == XD_SUCCESS && p->reorder) st = dnnl.memory_create(&m[1], &p->weights, engine, blocked);
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[2], &p->act_in, engine, act_in);
		if (st == XD_SUCCESS) st = dnnl.memory_create(&m[3], &p->act_out, engine, weights_or_act);
		args[n++] = (xd_exec_arg){XD_ARG_SRC, m[2]};
		args[n++] = (xd_exec_arg){XD_ARG_DIFF_DST, m[3]};
		args[n++] = (xd_exec_arg){XD_ARG_DIFF_WEIGHTS, p->reorder ? m[1] : m[0]};
		break;
	}
	if (st == XD_SUCCESS && p->scratch_bytes) {
		st = dnnl.memory_create(&m[4], &scratch_md, engine, scratch);
		args[n++] = (xd_exec_arg){XD_ARG_SCRATCHPAD, m[4]};
	}
	if (st == XD_SUCCESS) st = dnnl.primitive_execute(p->conv, thread_stream, n, args);
	if (st == XD_SUCCESS && p->g.pass == WEIGHT_GRAD && p->reorder) {
		xd_exec_arg r[2] = {{XD_ARG_FROM, m[1]}, {XD_ARG_TO, m[0]}};
		st = dnnl.primitive_execute(p->reorder, thread_stream, 2, r);
	}
	if (st == XD_SUCCESS) st = dnnl.stream_wait(thread_stream);
	for (int i = 0; i < 6; i++) {
		if (m[i]) dnnl.memory_destroy(m[i]);
	}
	free(blocked);
	free(scratch);
	return st != XD_SUCCESS;
}

// attr_pair reads the two-i64 array attribute name; 0 on success.
static int attr_pair(const xffi_attrs* attrs, const char* name, int64_t out[2]) {
	size_t len = strlen(name);
	for (int64_t i = 0; i < attrs->size; i++) {
		if (attrs->names[i]->len != len || memcmp(attrs->names[i]->ptr, name, len) != 0) continue;
		const xffi_array* a = attrs->attrs[i];
		if (attrs->types[i] != XFFI_ATTR_ARRAY || a->dtype != XFFI_S64 || a->size != 2) return 1;
		memcpy(out, a->data, 2 * sizeof(int64_t));
		return 0;
	}
	return 1;
}

static const xffi_buffer* buffer(const xffi_list* l, int i) {
	const xffi_buffer* b = l->items[i];
	return b->dtype == XFFI_F32 && b->rank == 4 ? b : NULL;
}

static xffi_error* handle(xffi_call_frame* f, int pass) {
	for (xffi_ext* e = f->extension_start; e != NULL; e = e->next) {
		if (e->type == 1) {
			xffi_metadata* m = ((xffi_metadata_ext*)e)->metadata;
			m->api_version.major = 0;
			m->api_version.minor = 1;
			m->traits = 0;
			return NULL;
		}
	}
	if (f->stage != XFFI_STAGE_EXECUTE) return NULL;
	if (f->args.size != 2 || f->rets.size != 1) return fail(f, 3, "onednn convolution: want 2 operands and 1 result");
	const xffi_buffer *a = buffer(&f->args, 0), *b = buffer(&f->args, 1), *r = buffer(&f->rets, 0);
	if (a == NULL || b == NULL || r == NULL) return fail(f, 3, "onednn convolution: want 4-D f32 operands and result");
	geometry g;
	memset(&g, 0, sizeof(g));
	g.pass = pass;
	g.threads = __atomic_load_n(&threads, __ATOMIC_RELAXED);
	if (g.threads == 0) g.threads = default_threads;  // OMP_NUM_THREADS, else every core, as the process started
	if (g.threads > 0 && omp_set_num_threads_fn != NULL) omp_set_num_threads_fn(g.threads);
	if (attr_pair(&f->attrs, "stride", g.stride) || attr_pair(&f->attrs, "pad_lo", g.pad_lo) || attr_pair(&f->attrs, "pad_hi", g.pad_hi))
		return fail(f, 3, "onednn convolution: want i64 pairs stride, pad_lo and pad_hi");
	const xffi_buffer *x, *w, *y;  // NHWC input, HWIO weights, NHWC output, by role
	switch (pass) {
	case FORWARD: x = a, w = b, y = r; break;
	case INPUT_GRAD: y = a, w = b, x = r; break;
	default: x = a, y = b, w = r; break;
	}
	g.n = x->dims[0], g.h = x->dims[1], g.w = x->dims[2], g.c = x->dims[3];
	g.kh = w->dims[0], g.kw = w->dims[1], g.o = w->dims[3];
	g.oh = y->dims[1], g.ow = y->dims[2];
	if (w->dims[2] != g.c || y->dims[0] != g.n || y->dims[3] != g.o)
		return fail(f, 3, "onednn convolution: operand shapes do not agree");
	const char* why = "out of memory";
	plan* p = find_plan(&g, &why);
	if (p == NULL) return fail(f, 13, why);
	unsigned long long start = now_ns();
	if (run(p, a->data, b->data, r->data)) return fail(f, 13, "onednn convolution: oneDNN failed to execute");
	__atomic_fetch_add(&call_ns[pass], now_ns() - start, __ATOMIC_RELAXED);
	__atomic_fetch_add(&call_flop[pass], (unsigned long long)(2 * g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw), __ATOMIC_RELAXED);
	__atomic_fetch_add(&call_count[pass], 1, __ATOMIC_RELAXED);
	return NULL;
}


static xffi_error* forward(xffi_call_frame* f) { return handle(f, FORWARD); }
static xffi_error* input_grad(xffi_call_frame* f) { return handle(f, INPUT_GRAD); }
static xffi_error* weight_grad(xffi_call_frame* f) { return handle(f, WEIGHT_GRAD); }

void* onednn_conv_forward_handler(void) { return (void*)forward; }
void* onednn_conv_input_grad_handler(void) { return (void*)input_grad; }
void* onednn_conv_weight_grad_handler(void) { return (void*)weight_grad; }
