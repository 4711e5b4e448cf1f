// The convolution custom calls of package onednn (conv.c).
#ifndef XLADDP_ONEDNN_CONV_H_
#define XLADDP_ONEDNN_CONV_H_

// onednn_load opens libdnnl.so.2 (or path) and its CPU engine; 0 on
// success, else *err (malloc'ed) says why. *version is "major.minor.patch".
int onednn_load(const char* path, char** version, char** err);

// The XLA FFI handlers, one per convolution pass, all channels-last:
// forward (x NHWC, w HWIO -> y NHWC), input gradient (dy, w -> dx) and
// weight gradient (x, dy -> dw HWIO). Attributes: stride, pad_lo, pad_hi
// (two i64 each, the forward convolution's).
void* onednn_conv_forward_handler(void);
void* onednn_conv_input_grad_handler(void);
void* onednn_conv_weight_grad_handler(void);

// onednn_set_threads sets the OpenMP threads each convolution may use
// (0: OpenMP's default, OMP_NUM_THREADS or every core).
void onednn_set_threads(int n);

// onednn_calls says how many times the pass (0 forward, 1 input
// gradient, 2 weight gradient) ran, for how long (reorders included) and
// how many floating-point operations its convolutions did.
void onednn_calls(int pass, unsigned long long* count, unsigned long long* ns, unsigned long long* flop);

#endif
