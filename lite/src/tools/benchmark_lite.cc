// benchmark_lite: load a .ms model, feed random inputs, report load time and latency statistics.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lite/model.h"

namespace {

struct Options {
  std::string model_file;
  int loop_count = 10;
  int warmup = 3;
  int threads = 1;
  std::string input_shape;   // "name:1,3,224,224;..." applied in input order
};

bool Starts(const char* arg, const char* flag, std::string& value) {
  const size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0 || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

void Usage() {
  std::puts(
      "usage: benchmark_lite --modelFile=model.ms [--loopCount=10] [--warmUpLoopCount=3] [--numThreads=1]\n"
      "                      [--inputShape=name:1,3,224,224;name2:...]\n"
      "Runs the model on random inputs and prints load time and min/avg/max latency in ms.");
}

std::vector<std::vector<int64_t>> ParseShapes(const std::string& spec) {
  std::vector<std::vector<int64_t>> shapes;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    const size_t colon = item.rfind(':');
    std::string dims = colon == std::string::npos ? item : item.substr(colon + 1);
    std::vector<int64_t> shape;
    size_t p = 0;
    while (p < dims.size()) {
      size_t c = dims.find(',', p);
      if (c == std::string::npos) c = dims.size();
      shape.push_back(std::stoll(dims.substr(p, c - p)));
      p = c + 1;
    }
    if (!item.empty()) shapes.push_back(shape);
    pos = end + 1;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      Usage();
      return 0;
    } else if (Starts(argv[i], "--modelFile", v)) {
      opt.model_file = v;
    } else if (Starts(argv[i], "--loopCount", v)) {
      opt.loop_count = std::max(1, std::atoi(v.c_str()));
    } else if (Starts(argv[i], "--warmUpLoopCount", v)) {
      opt.warmup = std::max(0, std::atoi(v.c_str()));
    } else if (Starts(argv[i], "--numThreads", v)) {
      opt.threads = std::max(1, std::atoi(v.c_str()));
    } else if (Starts(argv[i], "--inputShape", v)) {
      opt.input_shape = v;
    } else {
      std::fprintf(stderr, "unknown flag: %s\n", argv[i]);
      Usage();
      return 2;
    }
  }
  if (opt.model_file.empty()) {
    Usage();
    return 2;
  }
  try {
    using Clock = std::chrono::steady_clock;
    lite::Context ctx;
    ctx.thread_num = opt.threads;
    lite::Model model;
    auto t0 = Clock::now();
    model.BuildFromFile(opt.model_file, ctx);
    auto t1 = Clock::now();
    std::vector<lite::TensorInfo> inputs = model.GetInputs();
    if (!opt.input_shape.empty()) {
      auto shapes = ParseShapes(opt.input_shape);
      if (shapes.size() != inputs.size()) throw lite::InvalidArgument("--inputShape must give every input's shape");
      model.Resize(shapes);
      inputs = model.GetInputs();
    }
    std::mt19937 rng(0);
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<lite::TensorView> views;
    for (const auto& in : inputs) {
      for (int64_t d : in.shape)
        if (d < 0) throw lite::InvalidArgument("input '" + in.name + "' has a dynamic shape; pass --inputShape");
      const int64_t n = lite::ShapeNumel(in.shape);
      std::vector<uint8_t> buf(n * lite::DataTypeSize(in.dtype) + 1);
      if (in.dtype == lite::DataType::kFloat32) {
        std::uniform_real_distribution<float> dist(-1.f, 1.f);
        float* f = reinterpret_cast<float*>(buf.data());
        for (int64_t i = 0; i < n; ++i) f[i] = dist(rng);
      }
      buffers.push_back(std::move(buf));
      views.push_back({in.dtype, in.shape, buffers.back().data()});
    }
    for (int i = 0; i < opt.warmup; ++i) model.Predict(views);
    std::vector<double> ms;
    for (int i = 0; i < opt.loop_count; ++i) {
      auto a = Clock::now();
      model.Predict(views);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    double sum = 0;
    for (double v : ms) sum += v;
    std::sort(ms.begin(), ms.end());
    std::printf("Model = %s, NumThreads = %d, LoadAndPrepareTime = %.3f ms\n", opt.model_file.c_str(), opt.threads,
                std::chrono::duration<double, std::milli>(t1 - t0).count());
    std::printf("Running %d times: MinRunTime = %.3f ms, AvgRunTime = %.3f ms, MedianRunTime = %.3f ms, MaxRunTime = %.3f ms\n",
                opt.loop_count, ms.front(), sum / ms.size(), ms[ms.size() / 2], ms.back());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_lite: %s\n", e.what());
    return 1;
  }
}
