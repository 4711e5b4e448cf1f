#include <stdlib.h>
#include <string.h>

#include "compilehook.h"

// Exported by compilehook.go: returns 1 and a malloc'ed program in *out
// when it rewrote code, 0 to compile code as it is.
extern int pjrtxRewriteProgram(char* code, size_t size, char** out, size_t* out_size);

// The plugin's own PJRT_Client_Compile; one plugin is hooked per process.
static PJRT_Client_Compile* plugin_compile;

static PJRT_Error* compile_rewritten(PJRT_Client_Compile_Args* args) {
	const PJRT_Program* program = args->program;
	if (program == NULL || program->format_size != 4 || memcmp(program->format, "mlir", 4) != 0) {
		return plugin_compile(args);
	}
	char* code = NULL;
	size_t size = 0;
	if (!pjrtxRewriteProgram(program->code, program->code_size, &code, &size)) {
		return plugin_compile(args);
	}
	PJRT_Program rewritten = *program;
	rewritten.code = code;
	rewritten.code_size = size;
	args->program = &rewritten;
	PJRT_Error* err = plugin_compile(args);
	args->program = program;
	free(code);
	return err;
}

const PJRT_Api* pjrtx_hooked_api(const PJRT_Api* api) {
	size_t size = api->struct_size;
	if (size < offsetof(PJRT_Api, PJRT_Client_Compile) + sizeof(api->PJRT_Client_Compile)) {
		return NULL;
	}
	PJRT_Api* copy = malloc(size);
	if (copy == NULL) {
		return NULL;
	}
	memcpy(copy, api, size);
	plugin_compile = api->PJRT_Client_Compile;
	copy->PJRT_Client_Compile = compile_rewritten;
	return copy;
}
