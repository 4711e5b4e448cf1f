package pjrtx

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"
#include "pjrtx_error.h"

typedef const PJRT_Api* (*get_api_fn)(void);

// loaded_api returns the API table of a plugin that is already loaded, or NULL.
static const PJRT_Api* loaded_api(const char* path, char** err) {
	void* handle = dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
	if (handle == NULL) {
		const char* msg = dlerror();
		*err = strdup(msg ? msg : "plugin is not loaded in this process");
		return NULL;
	}
	get_api_fn fn = (get_api_fn)dlsym(handle, "GetPjrtApi");
	// Drop the reference NOLOAD added; go-xla's own handle keeps the library mapped.
	dlclose(handle);
	if (fn == NULL) {
		*err = strdup("the library exports no GetPjrtApi symbol");
		return NULL;
	}
	return fn();
}


// describe_device fills *id and *kind (malloc'ed) for device; returns 0 on success.
static int describe_device(const PJRT_Api* api, PJRT_Device* device, int* id, char** kind, char** err) {
	PJRT_Device_GetDescription_Args gargs;
	memset(&gargs, 0, sizeof(gargs));
	gargs.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
	gargs.device = device;
	PJRT_Error* e = api->PJRT_Device_GetDescription(&gargs);
	if (e != NULL) { *err = pjrtx_take_error(api, e); return 1; }

	PJRT_DeviceDescription_Id_Args iargs;
	memset(&iargs, 0, sizeof(iargs));
	iargs.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
	iargs.device_description = gargs.device_description;
	e = api->PJRT_DeviceDescription_Id(&iargs);
	if (e != NULL) { *err = pjrtx_take_error(api, e); return 1; }
	*id = iargs.id;

	PJRT_DeviceDescription_Kind_Args kargs;
	memset(&kargs, 0, sizeof(kargs));
	kargs.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
	kargs.device_description = gargs.device_description;
	e = api->PJRT_DeviceDescription_Kind(&kargs);
	if (e != NULL) { *err = pjrtx_take_error(api, e); return 1; }
	*kind = strndup(kargs.device_kind, kargs.device_kind_size);
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/go-xla/pjrt"
)

// DeviceInfo is what the plugin reports about one device.
type DeviceInfo struct {
	ID   int
	Kind string
}

// Describe returns the id and kind of each device, in order. pluginPath must
// be the absolute path go-xla loaded the plugin from.
func Describe(pluginPath string, devices []*pjrt.Device) ([]DeviceInfo, error) {
	if err := Compatible(); err != nil {
		return nil, err
	}
	cPath := C.CString(pluginPath)
	defer C.free(unsafe.Pointer(cPath))
	var cErr *C.char
	api := C.loaded_api(cPath, &cErr)
	if api == nil {
		return nil, fmt.Errorf("reading the PJRT API table of %s: %s", pluginPath, takeCString(cErr))
	}
	infos := make([]DeviceInfo, len(devices))
	for i, d := range devices {
		cDevice, err := cDevicePointer(d)
		if err != nil {
			return nil, err
		}
		var id C.int
		var kind *C.char
		if C.describe_device(api, (*C.PJRT_Device)(cDevice), &id, &kind, &cErr) != 0 {
			return nil, fmt.Errorf("describing device %d of %s: %s", i, pluginPath, takeCString(cErr))
		}
		infos[i] = DeviceInfo{ID: int(id), Kind: takeCString(kind)}
	}
	return infos, nil
}

// cDevicePointer reads go-xla's unexported PJRT_Device pointer; go-xla
// offers no accessor. A test pins the field so an upgrade that renames it
// fails loudly instead of reading garbage.
func cDevicePointer(d *pjrt.Device) (unsafe.Pointer, error) {
	if d == nil {
		return nil, errors.New("nil PJRT device")
	}
	field := reflect.ValueOf(d).Elem().FieldByName("cDevice")
	if !field.IsValid() || field.Kind() != reflect.Pointer {
		return nil, errors.New("go-xla's pjrt.Device has no cDevice pointer field: this go-xla version is not the pinned " + pinnedGoXLA)
	}
	return field.UnsafePointer(), nil
}

func takeCString(s *C.char) string {
	if s == nil {
		return "unknown error"
	}
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}
