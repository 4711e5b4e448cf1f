package pjrtx

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"

typedef const PJRT_Api* (*probe_get_api_fn)(void);

// probe_api loads path (kept loaded: PJRT plugins are never unloaded, and
// go-xla opens the same handle next) and returns its API table or NULL.
static const PJRT_Api* probe_api(const char* path, char** err) {
	void* handle = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (handle == NULL) {
		const char* msg = dlerror();
		*err = strdup(msg ? msg : "dlopen failed");
		return NULL;
	}
	probe_get_api_fn fn = (probe_get_api_fn)dlsym(handle, "GetPjrtApi");
	if (fn == NULL) {
		*err = strdup("the library exports no GetPjrtApi symbol");
		return NULL;
	}
	const PJRT_Api* api = fn();
	if (api == NULL) {
		*err = strdup("GetPjrtApi returned no API table (the plugin failed to initialise)");
	}
	return api;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// HeaderMajor is the PJRT C API major version of the header go-xla is built with.
const HeaderMajor = C.PJRT_API_MAJOR

// ProbeAPI loads the plugin at path and returns the PJRT C API version its
// table reports. go-xla takes a NULL table from GetPjrtApi as a plugin
// (v0.1.4 dereferenced it); probing first turns that into an error.
func ProbeAPI(path string) (major, minor int, err error) {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	var cErr *C.char
	api := C.probe_api(cPath, &cErr)
	if api == nil {
		return 0, 0, fmt.Errorf("loading %s: %s", path, takeCString(cErr))
	}
	major = int(api.pjrt_api_version.major_version)
	minor = int(api.pjrt_api_version.minor_version)
	if major != HeaderMajor {
		return major, minor, fmt.Errorf("%s reports PJRT C API v%d.%d, but go-xla speaks major version %d",
			path, major, minor, HeaderMajor)
	}
	return major, minor, nil
}
