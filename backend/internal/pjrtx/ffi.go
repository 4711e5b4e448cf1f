package pjrtx

/*
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"
#include "pjrtx_error.h"

// The PJRT FFI extension (XLA's pjrt_c_api_ffi_extension.h, version 2 and
// later: handlers registered by name and platform). Spelled here because
// the header go-xla vendors stops at the extension's type.
typedef struct {
	size_t struct_size;
	const char* target_name;
	size_t target_name_size;
	void* handler;
	const char* platform_name;
	size_t platform_name_size;
	unsigned int traits;
} pjrtx_ffi_register_args;

typedef PJRT_Error* pjrtx_ffi_register_fn(pjrtx_ffi_register_args* args);

typedef struct {
	PJRT_Extension_Base base;
	void* type_id_register;
	void* user_data_add;
	pjrtx_ffi_register_fn* register_handler;
} pjrtx_ffi_extension;

// register_ffi_handler registers handler (an XLA_FFI_Handler*) as the
// custom call target name on platform; 0 on success, else *err says why.
static int register_ffi_handler(const PJRT_Api* api, const char* name, const char* platform, void* handler, char** err) {
	const PJRT_Extension_Base* ext = api->extension_start;
	for (; ext != NULL; ext = ext->next) {
		if (ext->type == PJRT_Extension_Type_FFI) {
			break;
		}
	}
	if (ext == NULL) {
		*err = strdup("the plugin has no FFI extension");
		return 1;
	}
	if (ext->struct_size < sizeof(pjrtx_ffi_extension)) {
		*err = strdup("the plugin's FFI extension predates handler registration");
		return 1;
	}
	pjrtx_ffi_register_args args;
	memset(&args, 0, sizeof(args));
	args.struct_size = sizeof(args);
	args.target_name = name;
	args.target_name_size = strlen(name);
	args.handler = handler;
	args.platform_name = platform;
	args.platform_name_size = strlen(platform);
	PJRT_Error* e = ((const pjrtx_ffi_extension*)ext)->register_handler(&args);
	if (e != NULL) {
		*err = pjrtx_take_error(api, e);
		return 1;
	}
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

// RegisterFFIHandler registers handler, a C function of XLA's typed FFI
// (XLA_FFI_Handler), as the custom-call target name for programs that
// plugin compiles for platform ("Host" for XLA's CPU backend). XLA keeps
// the registration for the process; registering a name twice is an error
// of the plugin's.
func RegisterFFIHandler(plugin *pjrt.Plugin, name, platform string, handler unsafe.Pointer) error {
	if err := Compatible(); err != nil {
		return err
	}
	field, err := apiField(plugin)
	if err != nil {
		return err
	}
	cName, cPlatform := C.CString(name), C.CString(platform)
	defer C.free(unsafe.Pointer(cName))
	defer C.free(unsafe.Pointer(cPlatform))
	var cErr *C.char
	if C.register_ffi_handler((*C.PJRT_Api)(field.UnsafePointer()), cName, cPlatform, handler, &cErr) != 0 {
		return fmt.Errorf("pjrtx: registering the FFI handler %s with %s: %s", name, plugin.Path(), takeCString(cErr))
	}
	return nil
}

// apiField is go-xla's Plugin.api, the plugin's PJRT_Api table.
func apiField(plugin *pjrt.Plugin) (reflect.Value, error) {
	field := reflect.ValueOf(plugin).Elem().FieldByName("api")
	if !field.IsValid() || field.Kind() != reflect.Pointer || field.IsNil() {
		return field, errors.New("pjrtx: go-xla's Plugin has no API table field named api: this go-xla is not the pinned " + pinnedGoXLA)
	}
	return field, nil
}
