// One core's convolution passes through oneDNN (Debian's libdnnl 2.6, the
// version PyTorch 1.13 uses) at ResNet-18's CIFAR shapes, batch 32, 3x3,
// padding 1: forward, input gradient and weight gradient, with the layouts
// oneDNN picks (format_tag::any: blocked), with plain NCHW/OIHW, and as
// xladdp's custom calls run them (backend/internal/onednn): NHWC
// activations, the weights in the layout oneDNN picks.
// Prints one line a shape and pass: GFLOP/s, the median of 7.
//
//   g++ -O2 -o onednn_conv onednn_conv.cc -ldnnl && OMP_NUM_THREADS=1 taskset -c 0 ./onednn_conv
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Shape {
  int n, c, h, k, stride;
};

template <typename F>
double median_ms(F f) {
  f();  // warm up: primitive creation, caches
  std::vector<double> t;
  for (int i = 0; i < 7; i++) {
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const Shape shapes[] = {{32, 64, 32, 64, 1}, {32, 128, 16, 128, 1}, {32, 256, 8, 256, 1}, {32, 512, 4, 512, 1}, {32, 64, 32, 128, 2}};
  for (const char* mode : {"blocked", "nchw", "nhwc"}) {
    bool blocked = mode[0] == 'b', nhwc = mode[1] == 'h';
    for (auto sh : shapes) {
      int oh = (sh.h + 2 - 3) / sh.stride + 1;
      memory::dims src{sh.n, sh.c, sh.h, sh.h}, wei{sh.k, sh.c, 3, 3}, dst{sh.n, sh.k, oh, oh};
      memory::dims strides{sh.stride, sh.stride}, pad{1, 1};
      double flops = 2.0 * sh.n * sh.k * oh * oh * sh.c * 9;
      auto md = [&](const memory::dims& d, tag plain) {
        if (nhwc) return memory::desc(d, dt::f32, &d == &wei ? tag::any : tag::nhwc);
        return memory::desc(d, dt::f32, blocked ? tag::any : plain);
      };
      auto src_md = md(src, tag::nchw), wei_md = md(wei, tag::oihw), dst_md = md(dst, tag::nchw);
      auto fwd_pd = convolution_forward::primitive_desc(
          convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src_md, wei_md, dst_md, strides, pad, pad), eng);
      auto bd_pd = convolution_backward_data::primitive_desc(
          convolution_backward_data::desc(algorithm::convolution_direct, src_md, wei_md, dst_md, strides, pad, pad), eng, fwd_pd);
      auto bw_pd = convolution_backward_weights::primitive_desc(
          convolution_backward_weights::desc(algorithm::convolution_direct, src_md, wei_md, dst_md, strides, pad, pad), eng, fwd_pd);
      memory x(fwd_pd.src_desc(), eng), w(fwd_pd.weights_desc(), eng), y(fwd_pd.dst_desc(), eng);
      memory dy(bd_pd.diff_dst_desc(), eng), dx(bd_pd.diff_src_desc(), eng), dw(bw_pd.diff_weights_desc(), eng);
      memory x2(bw_pd.src_desc(), eng), dy2(bw_pd.diff_dst_desc(), eng);
      for (memory* m : {&x, &w, &dy, &x2, &dy2}) {
        float* p = static_cast<float*>(m->get_data_handle());
        for (size_t i = 0; i < m->get_desc().get_size() / sizeof(float); i++) p[i] = float(i % 17) / 17.0f - 0.5f;
      }
      convolution_forward fwd(fwd_pd);
      convolution_backward_data bd(bd_pd);
      convolution_backward_weights bw(bw_pd);
      double f = median_ms([&] { fwd.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}}); s.wait(); });
      double d = median_ms([&] { bd.execute(s, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dx}}); s.wait(); });
      double g = median_ms([&] { bw.execute(s, {{DNNL_ARG_SRC, x2}, {DNNL_ARG_DIFF_DST, dy2}, {DNNL_ARG_DIFF_WEIGHTS, dw}}); s.wait(); });
      std::printf("onednn %s %dx%dx%dx%d -> %d stride %d: forward %.1f, input gradient %.1f, weight gradient %.1f GFLOP/s (%s)\n",
                  mode, sh.n, sh.c, sh.h, sh.h, sh.k, sh.stride, flops / f / 1e6, flops / d / 1e6, flops / g / 1e6,
                  fwd_pd.impl_info_str());
    }
  }
  return 0;
}
