// oneDNN's convolution primitives on a list of Conv geometries (one a line: name C H W M KH KW SH SW PT PL PB PR
// group relu), for benchmarks/onednn_convs.py: weights reordered once into the layout oneDNN picks, activations nhwc,
// ReLU as a post-op where the model has one. `seq`: every layer in the model's order, each iteration, so weights and
// activations come from wherever the previous layers left them (as in a whole-model run); else each layer alone,
// repeated (its weights hot in the caches). Prints "name median_ms implementation" per layer, then TOTAL.
// Usage: convbench LIST f32|bf16|int8 REPS [seq]
#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <unordered_map>
using namespace dnnl;
int main(int argc, char** argv) {
  const bool bf16 = std::string(argv[2]) == "bf16", int8 = std::string(argv[2]) == "int8";
  const int reps = argc > 3 ? std::atoi(argv[3]) : 30;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::ifstream in(argv[1]);
  std::string line;
  double total = 0;
  struct Layer { std::string name; convolution_forward conv; memory wei, bias, sc; memory::desc src_md, dst_md; std::string impl; std::vector<double> t; };
  std::vector<Layer> layers;
  const bool sequence = argc > 4 && std::string(argv[4]) == "seq";
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    long C, H, W, M, KH, KW, SH, SW, PT, PL, PB, PR, G, relu;
    ls >> name >> C >> H >> W >> M >> KH >> KW >> SH >> SW >> PT >> PL >> PB >> PR >> G >> relu;
    const long OH = (H + PT + PB - KH) / SH + 1, OW = (W + PL + PR - KW) / SW + 1;
    memory::dims src{1, C, H, W}, dst{1, M, OH, OW}, bias{M};
    memory::dims wei = G == 1 ? memory::dims{M, C, KH, KW} : memory::dims{G, M / G, C / G, KH, KW};
    const auto act_dt = int8 ? memory::data_type::u8 : dt, wei_dt = int8 ? memory::data_type::s8 : dt;
    memory::desc src_md(src, act_dt, memory::format_tag::nhwc), dst_md(dst, act_dt, memory::format_tag::nhwc);
    memory::desc wei_any(wei, wei_dt, memory::format_tag::any), bias_md(bias, memory::data_type::f32, memory::format_tag::x);
    primitive_attr attr;
    if (int8) attr.set_scales_mask(DNNL_ARG_DST, 0), attr.set_scales_mask(DNNL_ARG_WEIGHTS, 0), attr.set_scales_mask(DNNL_ARG_SRC, 0);
    if (relu) {
      post_ops po;
      po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference, algorithm::convolution_direct, src_md,
                                           wei_any, bias_md, dst_md, {SH, SW}, {PT, PL}, {PB, PR}, attr);
    memory src_m(src_md, eng), dst_m(dst_md, eng), bias_m(bias_md, eng), wei_m(pd.weights_desc(), eng);
    const size_t sb = src_md.get_size();
    std::fill((char*)src_m.get_data_handle(), (char*)src_m.get_data_handle() + sb, 0x3f);
    std::fill((char*)wei_m.get_data_handle(), (char*)wei_m.get_data_handle() + pd.weights_desc().get_size(), 0x01);
    std::fill((float*)bias_m.get_data_handle(), (float*)bias_m.get_data_handle() + M, 0.f);
    convolution_forward conv(pd);
    memory::desc sc_md({1}, memory::data_type::f32, memory::format_tag::x);
    memory sc(sc_md, eng);
    *(float*)sc.get_data_handle() = 0.01f;
    if (sequence) {
      layers.push_back({name, conv, wei_m, bias_m, sc, src_md, dst_md, pd.impl_info_str(), {}});
      continue;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_BIAS, bias_m},
                                         {DNNL_ARG_DST, dst_m}};
    if (int8) for (int a : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}) args.insert({DNNL_ARG_ATTR_SCALES | a, sc});
    for (int i = 0; i < 3; ++i) conv.execute(s, args);
    s.wait();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      conv.execute(s, args);
      s.wait();
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    total += t[t.size() / 2];
    std::printf("%s %.4f %s\n", name.c_str(), t[t.size() / 2], pd.impl_info_str());
  }
  if (sequence) {
    // The network's order: every layer's weights and activations come from wherever the previous layers left them
    // (51 MB of bf16 weights cycle through the caches), as in a whole-model run. Activations ping-pong between two
    // buffers as large as the largest tensor.
    size_t big = 0;
    for (auto& l : layers) big = std::max({big, l.src_md.get_size(), l.dst_md.get_size()});
    std::vector<char> buf0(big, 0x3f), buf1(big, 0x3f);
    for (int it = 0; it < reps + 3; ++it)
      for (size_t i = 0; i < layers.size(); ++i) {
        auto& l = layers[i];
        memory src_m(l.src_md, eng, (i % 2 ? buf1 : buf0).data()), dst_m(l.dst_md, eng, (i % 2 ? buf0 : buf1).data());
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, l.wei}, {DNNL_ARG_BIAS, l.bias},
                                             {DNNL_ARG_DST, dst_m}};
        if (int8) for (int a : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}) args.insert({DNNL_ARG_ATTR_SCALES | a, l.sc});
        auto t0 = std::chrono::steady_clock::now();
        l.conv.execute(s, args);
        s.wait();
        if (it >= 3) l.t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    for (auto& l : layers) {
      std::sort(l.t.begin(), l.t.end());
      total += l.t[l.t.size() / 2];
      std::printf("%s %.4f %s\n", l.name.c_str(), l.t[l.t.size() / 2], l.impl.c_str());
    }
  }
  std::printf("TOTAL %.3f\n", total);
}
