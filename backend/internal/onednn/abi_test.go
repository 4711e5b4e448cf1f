package onednn

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// abiCheck compiles only if dnnl_abi.h agrees with the installed
// oneDNN's own header on every value the handlers pass and on the room
// the blobs leave for the descriptors the library fills.
const abiCheck = `
#include <stddef.h>
#include <oneapi/dnnl/dnnl.h>
#include "dnnl_abi.h"

#define SAME(ours, theirs) _Static_assert((ours) == (theirs), #ours " is not " #theirs)
SAME(XD_SUCCESS, dnnl_success);
SAME(XD_F32, dnnl_f32);
SAME(XD_TAG_ANY, dnnl_format_tag_any);
SAME(XD_TAG_ACDB, dnnl_nhwc);
SAME(XD_TAG_CDBA, dnnl_hwio);
SAME(XD_FORWARD_TRAINING, dnnl_forward_training);
SAME(XD_BACKWARD_DATA, dnnl_backward_data);
SAME(XD_BACKWARD_WEIGHTS, dnnl_backward_weights);
SAME(XD_CONVOLUTION_DIRECT, dnnl_convolution_direct);
SAME(XD_ENGINE_CPU, dnnl_cpu);
SAME(XD_QUERY_SRC_MD, dnnl_query_src_md);
SAME(XD_QUERY_DIFF_SRC_MD, dnnl_query_diff_src_md);
SAME(XD_QUERY_WEIGHTS_MD, dnnl_query_weights_md);
SAME(XD_QUERY_DIFF_WEIGHTS_MD, dnnl_query_diff_weights_md);
SAME(XD_QUERY_DST_MD, dnnl_query_dst_md);
SAME(XD_QUERY_DIFF_DST_MD, dnnl_query_diff_dst_md);
SAME(XD_QUERY_SCRATCHPAD_MD, dnnl_query_scratchpad_md);
SAME(XD_SCRATCHPAD_USER, dnnl_scratchpad_mode_user);
SAME(XD_STREAM_DEFAULT, dnnl_stream_default_flags);
SAME(XD_ARG_SRC, DNNL_ARG_SRC);
SAME(XD_ARG_DST, DNNL_ARG_DST);
SAME(XD_ARG_WEIGHTS, DNNL_ARG_WEIGHTS);
SAME(XD_ARG_SCRATCHPAD, DNNL_ARG_SCRATCHPAD);
SAME(XD_ARG_DIFF_SRC, DNNL_ARG_DIFF_SRC);
SAME(XD_ARG_DIFF_DST, DNNL_ARG_DIFF_DST);
SAME(XD_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_WEIGHTS);
SAME(XD_ARG_FROM, DNNL_ARG_FROM);
SAME(XD_ARG_TO, DNNL_ARG_TO);
SAME(sizeof(xd_dims), sizeof(dnnl_dims_t));
SAME(sizeof(xd_exec_arg), sizeof(dnnl_exec_arg_t));
SAME(offsetof(xd_exec_arg, memory), offsetof(dnnl_exec_arg_t, memory));
SAME(sizeof(xd_version), sizeof(dnnl_version_t));
SAME(offsetof(xd_version, hash), offsetof(dnnl_version_t, hash));
_Static_assert(sizeof(dnnl_memory_desc_t) <= sizeof(xd_md), "xd_md is too small");
_Static_assert(sizeof(dnnl_convolution_desc_t) <= sizeof(xd_conv_desc), "xd_conv_desc is too small");
int main(void) { return 0; }
`

// TestABIMatchesTheInstalledHeader compiles abiCheck against the
// installed oneDNN header (make deps installs libdnnl-dev).
func TestABIMatchesTheInstalledHeader(t *testing.T) {
	if _, err := os.Stat("/usr/include/oneapi/dnnl/dnnl.h"); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("oneDNN's header is missing and installing it needs root (sudo apt-get install libdnnl-dev): %v", err)
		}
		t.Fatalf("oneDNN's header is missing (make deps installs libdnnl-dev): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "abi.c")
	require.NoError(t, os.WriteFile(src, []byte(abiCheck), 0o644))
	wd, err := os.Getwd()
	require.NoError(t, err)
	out, err := exec.Command("gcc", "-std=c11", "-fsyntax-only", "-I", wd, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
