// benchmark_lite: load a .ms model, feed inputs (random or from files), report load time and latency
// statistics; optionally check outputs against reference data, profile per operator and write a trace.
// Flag names follow MindSpore Lite's benchmark tool.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lite/model.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_file;
  int loop_count = 10;
  int warmup = 3;
  int threads = 1;
  bool bind_cores = false;
  std::string precision_mode = "enforce_fp32";
  std::string input_shape;        // "name:1,3,224,224;..." applied in input order
  std::string in_data_files;      // comma-separated raw binary files, one per input
  std::string benchmark_data;     // expected outputs (text, MindSpore Lite calibration format)
  double accuracy_threshold = 0.5;  // percent mean relative bias
  bool time_profiling = false;
  std::string trace_file;
};

const char kUsage[] =
    "usage: benchmark_lite --modelFile=model.ms [options]\n"
    "  --loopCount=10            timed runs\n"
    "  --warmUpLoopCount=3       untimed runs first\n"
    "  --numThreads=1            threads running kernels (the caller included)\n"
    "  --cpuBindMode=0|1         1 pins the threads to cores\n"
    "  --enableFp16=true         precision_mode preferred_fp16 (float32 on CPUs without fp16 arithmetic)\n"
    "  --precisionMode=m         enforce_fp32 (default), preferred_bf16 (bf16 dot products on AVX512_BF16 CPUs)\n"
    "                            or preferred_fp16\n"
    "  --inputShape=n:1,3,224,224;n2:...   shapes of dynamic inputs, in input order\n"
    "  --inDataFile=a.bin,b.bin  raw little-endian input data, one file per input (random data if absent)\n"
    "  --benchmarkDataFile=f     expected outputs; per output a line 'name rank d0 d1 ...' then a line of values\n"
    "  --accuracyThreshold=0.5   largest mean relative bias (percent) accepted against --benchmarkDataFile\n"
    "  --timeProfiling           per-operator-type and per-node time table over the timed runs\n"
    "  --traceFile=trace.json    Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev) of one run\n";

bool Starts(const char* arg, const char* flag, std::string& value) {
  const size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0) return false;
  if (arg[n] == '\0') {
    value.clear();
    return true;
  }
  if (arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(sep, pos);
    if (end == std::string::npos) end = s.size();
    if (end > pos) parts.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return parts;
}

// `parse(v, &used)` (std::stol, std::stod, ...) into `out`; false unless it read all of `v`.
template <typename T, typename Parse>
bool ParseWhole(const std::string& v, Parse parse, T& out) {
  size_t used = 0;
  try {
    out = parse(v, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used != 0 && used == v.size();
}

std::vector<std::vector<int64_t>> ParseShapes(const std::string& spec) {
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string& item : Split(spec, ';')) {
    const size_t colon = item.rfind(':');
    std::vector<int64_t> shape;
    for (const std::string& d : Split(colon == std::string::npos ? item : item.substr(colon + 1), ',')) {
      long long dim = -2;
      if (!ParseWhole(d, [](const std::string& s, size_t* used) { return std::stoll(s, used); }, dim) || dim < -1)
        throw lite::InvalidArgument("--inputShape: dim '" + d + "' of '" + item + "' is not a size (>= 0, or -1)");
      shape.push_back(dim);
    }
    shapes.push_back(shape);
  }
  return shapes;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw lite::InvalidArgument("cannot open '" + path + "'");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Expected outputs in MindSpore Lite's calibration text format.
struct Expected {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

std::map<std::string, Expected> ReadBenchmarkData(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw lite::InvalidArgument("cannot open '" + path + "'");
  std::map<std::string, Expected> out;
  std::string header, values;
  while (std::getline(f, header)) {
    if (header.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream hs(header);
    std::string name;
    int rank = -1;
    hs >> name >> rank;
    if (!hs || rank < 0 || rank > 16) throw lite::InvalidArgument("'" + path + "': bad header line '" + header + "'");
    Expected e;
    for (int i = 0; i < rank; ++i) {
      int64_t d = -1;
      hs >> d;
      if (!hs || d < 0) throw lite::InvalidArgument("'" + path + "': bad dimensions in '" + header + "'");
      e.shape.push_back(d);
    }
    if (!std::getline(f, values)) throw lite::InvalidArgument("'" + path + "': no values for '" + name + "'");
    std::istringstream vs(values);
    double v;
    while (vs >> v) e.values.push_back(v);
    if (static_cast<int64_t>(e.values.size()) != lite::ShapeNumel(e.shape))
      throw lite::InvalidArgument("'" + path + "': '" + name + "' has " + std::to_string(e.values.size()) +
                                  " values for shape of " + std::to_string(lite::ShapeNumel(e.shape)));
    out[name] = std::move(e);
  }
  return out;
}

double ElementAsDouble(const lite::Tensor& t, int64_t i) {
  const void* p = t.buffer.get();
  switch (t.info.dtype) {
    case lite::DataType::kFloat32: return static_cast<const float*>(p)[i];
    case lite::DataType::kFloat64: return static_cast<const double*>(p)[i];
    case lite::DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case lite::DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case lite::DataType::kInt8: return static_cast<const int8_t*>(p)[i];
    case lite::DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case lite::DataType::kBool: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
    default: throw lite::NotSupported(std::string("cannot compare outputs of dtype ") + lite::DataTypeName(t.info.dtype));
  }
}

// Mean relative bias in percent, as MindSpore Lite reports it: elements within 1e-5 relative (+1e-8 absolute)
// count as exact; the others add |a-b|/|b| (or |a-b| where |b| is tiny), averaged over those that differ.
bool CompareOutputs(const std::vector<lite::Tensor>& outs, const std::map<std::string, Expected>& expected,
                    double threshold) {
  bool ok = true;
  for (const lite::Tensor& t : outs) {
    auto it = expected.find(t.info.name);
    if (it == expected.end()) {
      std::printf("Output '%s' has no data in the benchmark file; not compared\n", t.info.name.c_str());
      continue;
    }
    const Expected& e = it->second;
    if (e.shape != t.info.shape) {
      std::printf("Output '%s': shape %s differs from the benchmark file's %s\n", t.info.name.c_str(),
                  lite::ShapeToString(t.info.shape).c_str(), lite::ShapeToString(e.shape).c_str());
      ok = false;
      continue;
    }
    double sum = 0, max_abs = 0;
    int64_t differing = 0;
    for (size_t i = 0; i < e.values.size(); ++i) {
      const double a = ElementAsDouble(t, static_cast<int64_t>(i)), b = e.values[i];
      if (std::isnan(a) != std::isnan(b)) {
        sum += 1.0;
        ++differing;
        continue;
      }
      const double diff = std::fabs(a - b);
      max_abs = std::max(max_abs, diff);
      if (diff <= 1e-8 + 1e-5 * std::fabs(b)) continue;
      sum += std::fabs(b) > 1e-5 ? diff / std::fabs(b) : diff;
      ++differing;
    }
    const double bias = differing ? 100.0 * sum / differing : 0.0;
    std::printf("Mean bias of output '%s': %.6f%% (max abs diff %.3g, %lld of %zu elements differ)\n",
                t.info.name.c_str(), bias, max_abs, static_cast<long long>(differing), e.values.size());
    if (!(bias <= threshold)) ok = false;
  }
  return ok;
}

std::string JsonEscape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else {
      r += c;
    }
  }
  return r;
}

void WriteTrace(const std::string& path, const std::vector<lite::NodeProfile>& profile) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw lite::InvalidArgument("cannot write '" + path + "'");
    f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    for (size_t i = 0; i < profile.size(); ++i) {
      const lite::NodeProfile& p = profile[i];
      char times[96];
      std::snprintf(times, sizeof times, "\"ts\":%.3f,\"dur\":%.3f", p.start_us, p.duration_us);
      f << "{\"name\":\"" << JsonEscape(p.name) << "\",\"cat\":\"" << JsonEscape(p.op) << "\",\"ph\":\"X\","
        << times << ",\"pid\":1,\"tid\":1,\"args\":{\"op\":\"" << JsonEscape(p.op) << "\",\"kernel\":\""
        << JsonEscape(p.kernel) << "\"}}"
        << (i + 1 < profile.size() ? ",\n" : "\n");
    }
    f << "]}\n";
    if (!f.flush()) throw lite::InvalidArgument("cannot write '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw lite::InvalidArgument("cannot write '" + path + "'");
}

struct Accum {
  double total_us = 0;
  int64_t calls = 0;
  std::string op;
  std::string kernel;
};

void PrintProfile(const std::vector<std::vector<lite::NodeProfile>>& runs) {
  std::map<std::string, Accum> by_type;
  std::vector<std::pair<std::string, Accum>> by_node;   // execution order
  std::map<std::string, size_t> node_index;
  double total = 0;
  for (const auto& run : runs) {
    for (const lite::NodeProfile& p : run) {
      Accum& t = by_type[p.op];
      t.total_us += p.duration_us;
      t.calls += 1;
      auto it = node_index.find(p.name);
      if (it == node_index.end()) {
        it = node_index.emplace(p.name, by_node.size()).first;
        by_node.push_back({p.name, Accum{0, 0, p.op, p.kernel.empty() ? "-" : p.kernel}});
      }
      by_node[it->second].second.total_us += p.duration_us;
      by_node[it->second].second.calls += 1;
      total += p.duration_us;
    }
  }
  const double n = static_cast<double>(std::max<size_t>(runs.size(), 1));
  std::vector<std::pair<std::string, Accum>> types(by_type.begin(), by_type.end());
  std::sort(types.begin(), types.end(), [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  std::printf("\n-------------------------------------------------------------------------\n");
  std::printf("%-28s %12s %9s %9s %12s\n", "opType", "avg(ms)", "percent", "calls", "avgPerCall(ms)");
  for (const auto& [op, a] : types)
    std::printf("%-28s %12.4f %8.2f%% %9lld %12.4f\n", op.c_str(), a.total_us / n / 1000.0,
                total > 0 ? 100.0 * a.total_us / total : 0.0, static_cast<long long>(a.calls / static_cast<int64_t>(n)),
                a.total_us / std::max<int64_t>(a.calls, 1) / 1000.0);
  std::printf("\n%-40s %-20s %12s %9s %7s  %s\n", "opName", "opType", "avg(ms)", "percent", "calls", "kernel");
  for (const auto& [name, a] : by_node)
    std::printf("%-40s %-20s %12.4f %8.2f%% %7lld  %s\n", name.c_str(), a.op.c_str(), a.total_us / n / 1000.0,
                total > 0 ? 100.0 * a.total_us / total : 0.0, static_cast<long long>(a.calls), a.kernel.c_str());
  std::printf("-------------------------------------------------------------------------\n");
  std::printf("Sum of node times per run: %.3f ms\n\n", total / n / 1000.0);
}

int Run(const Options& opt) {
  lite::Context ctx;
  ctx.thread_num = opt.threads;
  ctx.bind_cores = opt.bind_cores;
  ctx.precision_mode = opt.precision_mode;
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
  auto t2 = Clock::now();
  const std::vector<std::string> files = Split(opt.in_data_files, ',');
  if (!files.empty() && files.size() != inputs.size())
    throw lite::InvalidArgument("--inDataFile gives " + std::to_string(files.size()) + " files for " +
                                std::to_string(inputs.size()) + " inputs");
  std::mt19937 rng(0);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<lite::TensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const lite::TensorInfo& in = inputs[i];
    for (int64_t d : in.shape)
      if (d < 0) throw lite::InvalidArgument("input '" + in.name + "' has a dynamic shape; pass --inputShape");
    const int64_t n = lite::ShapeNumel(in.shape);
    const size_t nbytes = static_cast<size_t>(n) * lite::DataTypeSize(in.dtype);
    std::vector<uint8_t> buf;
    if (!files.empty()) {
      buf = ReadFile(files[i]);
      if (buf.size() != nbytes)
        throw lite::InvalidArgument("'" + files[i] + "' has " + std::to_string(buf.size()) + " bytes; input '" +
                                    in.name + "' " + lite::ShapeToString(in.shape) + " " +
                                    lite::DataTypeName(in.dtype) + " needs " + std::to_string(nbytes));
    } else {
      buf.assign(nbytes, 0);
      if (in.dtype == lite::DataType::kFloat32) {
        std::uniform_real_distribution<float> dist(-1.f, 1.f);
        float* f = reinterpret_cast<float*>(buf.data());
        for (int64_t k = 0; k < n; ++k) f[k] = dist(rng);
      }
    }
    buf.reserve(buf.size() + 1);   // a non-null pointer for empty tensors
    buffers.push_back(std::move(buf));
    views.push_back({in.dtype, in.shape, buffers.back().data()});
  }
  std::printf("Model = %s, NumThreads = %d, LoadAndPrepareTime = %.3f ms", opt.model_file.c_str(), opt.threads,
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  if (!opt.input_shape.empty())
    std::printf(", ResizeTime = %.3f ms", std::chrono::duration<double, std::milli>(t2 - t1).count());
  std::printf(", InputData = %s, Precision = %s\n", files.empty() ? "random" : "files", model.ComputePrecision().c_str());

  const bool profiling = opt.time_profiling || !opt.trace_file.empty();
  std::vector<lite::Tensor> outputs;
  for (int i = 0; i < opt.warmup; ++i) outputs = model.Predict(views);
  if (profiling) model.SetProfiling(true);
  std::vector<double> ms;
  std::vector<std::vector<lite::NodeProfile>> profiles;
  for (int i = 0; i < opt.loop_count; ++i) {
    auto a = Clock::now();
    outputs = model.Predict(views);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    if (profiling) profiles.push_back(model.LastProfile());
  }
  double sum = 0;
  for (double v : ms) sum += v;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  if (opt.time_profiling) PrintProfile(profiles);
  std::printf("Running %d times: MinRunTime = %.3f ms, AvgRunTime = %.3f ms, MedianRunTime = %.3f ms, MaxRunTime = %.3f ms%s\n",
              opt.loop_count, sorted.front(), sum / ms.size(), sorted[sorted.size() / 2], sorted.back(),
              profiling ? " (profiled: one clock read per node)" : "");
  if (!opt.trace_file.empty()) {
    // The median run, so one outlier does not become the picture of the model.
    const size_t median = std::min_element(ms.begin(), ms.end(), [&](double a, double b) {
                            return std::fabs(a - sorted[sorted.size() / 2]) < std::fabs(b - sorted[sorted.size() / 2]);
                          }) - ms.begin();
    WriteTrace(opt.trace_file, profiles[median]);
    std::printf("Trace of run %zu written to %s\n", median + 1, opt.trace_file.c_str());
  }
  if (!opt.benchmark_data.empty()) {
    const bool ok = CompareOutputs(outputs, ReadBenchmarkData(opt.benchmark_data), opt.accuracy_threshold);
    std::printf("%s: mean bias %s the accuracy threshold %.4g%%\n", ok ? "Accuracy check passed" : "Accuracy check FAILED",
                ok ? "within" : "above", opt.accuracy_threshold);
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace

// The integer value of a flag, whole and at least `min`; otherwise an error naming the flag.
static int FlagInt(const char* flag, const std::string& v, int min) {
  long value = 0;
  if (!ParseWhole(v, [](const std::string& s, size_t* used) { return std::stol(s, used); }, value))
    throw std::invalid_argument(std::string(flag) + "='" + v + "' is not an integer");
  if (value < min || value > 1000000000L)
    throw std::invalid_argument(std::string(flag) + "=" + v + " must be at least " + std::to_string(min));
  return static_cast<int>(value);
}

static double FlagDouble(const char* flag, const std::string& v) {
  double value = 0;
  if (!ParseWhole(v, [](const std::string& s, size_t* used) { return std::stod(s, used); }, value))
    throw std::invalid_argument(std::string(flag) + "='" + v + "' is not a number");
  return value;
}

int main(int argc, char** argv) {
  Options opt;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v;
      const char* a = argv[i];
      if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
        std::fputs(kUsage, stdout);
        return 0;
      } else if (Starts(a, "--modelFile", v)) {
        opt.model_file = v;
      } else if (Starts(a, "--loopCount", v)) {
        opt.loop_count = FlagInt("--loopCount", v, 1);
      } else if (Starts(a, "--warmUpLoopCount", v)) {
        opt.warmup = FlagInt("--warmUpLoopCount", v, 0);
      } else if (Starts(a, "--numThreads", v)) {
        opt.threads = FlagInt("--numThreads", v, 1);
      } else if (Starts(a, "--cpuBindMode", v)) {
        opt.bind_cores = v != "0";
      } else if (Starts(a, "--enableFp16", v)) {
        opt.precision_mode = v == "true" || v == "1" || v.empty() ? "preferred_fp16" : "enforce_fp32";
      } else if (Starts(a, "--precisionMode", v)) {
        opt.precision_mode = v;
      } else if (Starts(a, "--inputShape", v) || Starts(a, "--inputShapes", v)) {
        opt.input_shape = v;
      } else if (Starts(a, "--inDataFile", v)) {
        opt.in_data_files = v;
      } else if (Starts(a, "--benchmarkDataFile", v)) {
        opt.benchmark_data = v;
      } else if (Starts(a, "--accuracyThreshold", v)) {
        opt.accuracy_threshold = FlagDouble("--accuracyThreshold", v);
      } else if (Starts(a, "--timeProfiling", v)) {
        opt.time_profiling = v.empty() || v == "true" || v == "1";
      } else if (Starts(a, "--traceFile", v)) {
        opt.trace_file = v;
      } else {
        std::fprintf(stderr, "benchmark_lite: unknown flag: %s\n%s", a, kUsage);
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_lite: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (opt.model_file.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    return Run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark_lite: %s\n", e.what());
    return 1;
  }
}
