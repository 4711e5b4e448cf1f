// A PJRT plugin stand-in for the tests of the key-value callbacks: it is
// the real CPU plugin ($XLADDP_KV_STANDIN_REAL) but for
// PJRT_Client_Create, which first uses the callbacks as a distributed
// runtime would (put this rank's key, get every rank's, try-get a missing
// key, put an oversized value, get a key a hostile peer wrote) and
// records each call and its outcome, a line each, in
// $XLADDP_KV_STANDIN_RECORD. Built by the tests with cc -shared.
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pjrt_c_api.h"

static PJRT_Api api;
static PJRT_Client_Create* real_create;

// The plugin's side of PJRT_CallbackError: the last error the callbacks
// reported, returned as a token the stand-in recognizes.
static __thread int last_code;
static __thread char last_msg[512];
static int error_token;

static PJRT_Error* record_error(PJRT_Error_Code code, const char* msg, size_t size) {
	last_code = (int)code;
	snprintf(last_msg, sizeof(last_msg), "%.*s", (int)size, msg);
	return (PJRT_Error*)&error_token;
}
static PJRT_CallbackError callback_error = record_error;

static void record(const char* fmt, const char* a, const char* b) {
	char line[1024];
	int n = snprintf(line, sizeof(line), fmt, getenv("RANK"), a, b);
	int fd = open(getenv("XLADDP_KV_STANDIN_RECORD"), O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd >= 0) {
		if (write(fd, line, n) != n) {
		}
		close(fd);
	}
}

static void outcome(const char* call, const char* key, PJRT_Error* err, const char* value, size_t size) {
	char what[600];
	if (err != NULL) {
		snprintf(what, sizeof(what), "error %d %s", last_code, last_msg);
	} else {
		snprintf(what, sizeof(what), "ok %.*s", (int)size, value != NULL ? value : "");
	}
	char head[128];
	snprintf(head, sizeof(head), "%s %s", call, key);
	record("rank %s: %s: %s\n", head, what);
}

static void get(PJRT_Client_Create_Args* args, const char* key) {
	PJRT_KeyValueGetCallback_Args g;
	memset(&g, 0, sizeof(g));
	g.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
	g.key = key;
	g.key_size = strlen(key);
	g.timeout_in_ms = 60000;
	g.callback_error = &callback_error;
	g.user_arg = args->kv_get_user_arg;
	PJRT_Error* err = args->kv_get_callback(&g);
	outcome("get", key, err, g.value, g.value_size);
	if (err == NULL && g.value_deleter_callback != NULL) {
		g.value_deleter_callback(g.value);
	}
}

static void put(PJRT_Client_Create_Args* args, const char* key, const char* value, size_t size) {
	PJRT_KeyValuePutCallback_Args p;
	memset(&p, 0, sizeof(p));
	p.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
	p.key = key;
	p.key_size = strlen(key);
	p.value = value;
	p.value_size = size;
	p.callback_error = &callback_error;
	p.user_arg = args->kv_put_user_arg;
	PJRT_Error* err = args->kv_put_callback(&p);
	outcome("put", key, err, NULL, 0);
}

// try_get records its outcome under label.
static void try_get(PJRT_Client_Create_Args* args, const char* key, const char* label) {
	PJRT_KeyValueTryGetCallback_Args g;
	memset(&g, 0, sizeof(g));
	g.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
	g.key = key;
	g.key_size = strlen(key);
	g.callback_error = &callback_error;
	g.user_arg = args->kv_try_get_user_arg;
	PJRT_Error* err = args->kv_try_get_callback(&g);
	outcome("try-get", label, err, g.value, g.value_size);
	if (err == NULL && g.value_deleter_callback != NULL) {
		g.value_deleter_callback(g.value);
	}
}

static PJRT_Error* standin_create(PJRT_Client_Create_Args* args) {
	if (args->kv_get_callback == NULL || args->kv_put_callback == NULL || args->kv_try_get_callback == NULL) {
		record("rank %s: %s%s\n", "no callbacks", "");
		return real_create(args);
	}
	int world = atoi(getenv("WORLD_SIZE"));
	char key[64], value[64];
	snprintf(key, sizeof(key), "standin/%s", getenv("RANK"));
	snprintf(value, sizeof(value), "from rank %s", getenv("RANK"));
	put(args, key, value, strlen(value));
	for (int r = 0; r < world; r++) {
		snprintf(key, sizeof(key), "standin/%d", r);
		get(args, key);
	}
	try_get(args, "standin/missing", "standin/missing");
	size_t big = 9 << 20;
	char* huge = calloc(big, 1);
	put(args, "standin/big", huge, big);
	free(huge);
	// Keys the callbacks refuse: empty, and over 4 KiB (recorded as "long").
	try_get(args, "", "");
	char* long_key = malloc(5000);
	memset(long_key, 'k', 4999);
	long_key[4999] = 0;
	try_get(args, long_key, "long");
	free(long_key);
	if (getenv("XLADDP_KV_STANDIN_FORGED") != NULL) {
		get(args, "standin/forged");
	}
	return real_create(args);
}

const PJRT_Api* GetPjrtApi(void) {
	void* h = dlopen(getenv("XLADDP_KV_STANDIN_REAL"), RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		return NULL;
	}
	const PJRT_Api* (*real_api)(void) = (const PJRT_Api* (*)(void))dlsym(h, "GetPjrtApi");
	const PJRT_Api* real = real_api != NULL ? real_api() : NULL;
	if (real == NULL) {
		return NULL;
	}
	size_t size = real->struct_size < sizeof(api) ? real->struct_size : sizeof(api);
	memcpy(&api, real, size);
	api.struct_size = size;
	real_create = real->PJRT_Client_Create;
	api.PJRT_Client_Create = standin_create;
	return &api;
}
