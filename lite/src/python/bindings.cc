// pybind11 module lite._lite: a thin layer over the public C++ API in lite/include/lite.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <mutex>

#include "core/kernel.h"
#include "core/thread_pool.h"
#include "cpu/conv/pixel_tile_conv.h"
#include "cpu/conv/winograd/winograd_blocked.h"
#include "cpu/core_latency.h"
#include "cpu/detection/nms.h"
#include "cpu/image/resize_bilinear.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/dq_float_prompts.h"
#include "cpu/gemm/dq_bf16_prompts.h"
#include "cpu/gemm/fma_peak.h"
#include "cpu/gemm/gemm.h"
#include "cpu/onednn/onednn_library.h"
#include "cpu/isa_dispatch.h"
#include "cpu/precision.h"
#include "lite/attention.h"
#include "lite/rotary.h"
#include "lite/errors.h"
#include "lite/model.h"
#include "lite/model_group.h"
#include "lite/model_parallel_runner.h"

namespace py = pybind11;

namespace {

lite::DataType FromNumpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return lite::DataType::kFloat32;
  if (kind == 'f' && size == 2) return lite::DataType::kFloat16;
  if (kind == 'f' && size == 8) return lite::DataType::kFloat64;
  if (kind == 'i' && size == 8) return lite::DataType::kInt64;
  if (kind == 'i' && size == 4) return lite::DataType::kInt32;
  if (kind == 'i' && size == 2) return lite::DataType::kInt16;
  if (kind == 'i' && size == 1) return lite::DataType::kInt8;
  if (kind == 'u' && size == 1) return lite::DataType::kUInt8;
  if (kind == 'u' && size == 2) return lite::DataType::kUInt16;
  if (kind == 'u' && size == 4) return lite::DataType::kUInt32;
  if (kind == 'u' && size == 8) return lite::DataType::kUInt64;
  if (kind == 'b') return lite::DataType::kBool;
  throw lite::TypeMismatch("numpy dtype " + std::string(py::str(dt)) + " has no lite equivalent");
}

py::dtype ToNumpy(lite::DataType t) {
  switch (t) {
    case lite::DataType::kFloat32: return py::dtype::of<float>();
    case lite::DataType::kFloat16: return py::dtype("float16");
    case lite::DataType::kFloat64: return py::dtype::of<double>();
    case lite::DataType::kInt64: return py::dtype::of<int64_t>();
    case lite::DataType::kInt32: return py::dtype::of<int32_t>();
    case lite::DataType::kInt16: return py::dtype::of<int16_t>();
    case lite::DataType::kInt8: return py::dtype::of<int8_t>();
    case lite::DataType::kUInt8: return py::dtype::of<uint8_t>();
    case lite::DataType::kUInt16: return py::dtype::of<uint16_t>();
    case lite::DataType::kUInt32: return py::dtype::of<uint32_t>();
    case lite::DataType::kUInt64: return py::dtype::of<uint64_t>();
    case lite::DataType::kBool: return py::dtype::of<bool>();
    case lite::DataType::kBFloat16: return py::dtype("uint16");   // raw bits: NumPy has no bfloat16
    default: throw lite::TypeMismatch("dtype has no numpy equivalent");
  }
}

// lite::ComputeAttention on buffers given as addresses and element strides (see lite_boost/ops/_kernel.py).
void AttentionFromSpec(const py::dict& spec, int threads) {
  auto i64 = [&](const char* key, int64_t fallback = 0) {
    return spec.contains(key) && !spec[key].is_none() ? spec[key].cast<int64_t>() : fallback;
  };
  auto ptr = [&](const char* key) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i64(key))); };
  auto strides = [&](const char* key) {
    const auto v = spec[key].cast<std::vector<int64_t>>();
    if (v.size() != 3) throw lite::InvalidArgument(std::string(key) + " must hold 3 strides");
    return v;
  };
  auto lens = [&](const char* key) {
    return spec.contains(key) && !spec[key].is_none() ? spec[key].cast<std::vector<int64_t>>() : std::vector<int64_t>{};
  };
  lite::AttentionArgs a;
  a.batch = i64("batch");
  a.q_heads = i64("q_heads");
  a.kv_heads = i64("kv_heads");
  a.q_len = i64("q_len");
  a.kv_len = i64("kv_len");
  a.head_dim = i64("head_dim");
  a.v_dim = i64("v_dim");
  a.elem = static_cast<lite::AttentionElem>(i64("elem"));
  const auto qs = strides("q_strides"), ks = strides("k_strides"), vs = strides("v_strides"), os = strides("out_strides");
  a.q = {ptr("q"), qs[0], qs[1], qs[2]};
  a.k = {ptr("k"), ks[0], ks[1], ks[2]};
  a.v = {ptr("v"), vs[0], vs[1], vs[2]};
  a.out = ptr("out");
  a.out_batch_stride = os[0];
  a.out_head_stride = os[1];
  a.out_row_stride = os[2];
  a.scale = spec["scale"].cast<float>();
  a.causal = spec.contains("causal") && spec["causal"].cast<bool>();
  a.zero_masked_rows = spec.contains("zero_masked_rows") && spec["zero_masked_rows"].cast<bool>();
  if (i64("mask")) {
    const auto ms = spec["mask_strides"].cast<std::vector<int64_t>>();
    if (ms.size() != 4) throw lite::InvalidArgument("mask_strides must hold 4 strides");
    a.mask.keep = static_cast<const uint8_t*>(ptr("mask"));
    a.mask.keep_marks_masked = spec.contains("mask_marks_masked") && spec["mask_marks_masked"].cast<bool>();
    a.mask.batch_stride = ms[0];
    a.mask.head_stride = ms[1];
    a.mask.row_stride = ms[2];
    a.mask.col_stride = ms[3];
  }
  const std::vector<int64_t> q_lens = lens("q_lens"), kv_lens = lens("kv_lens");
  if (!q_lens.empty()) a.q_lens = q_lens.data();
  if (!kv_lens.empty()) a.kv_lens = kv_lens.data();
  if ((a.q_lens && static_cast<int64_t>(q_lens.size()) != a.batch) ||
      (a.kv_lens && static_cast<int64_t>(kv_lens.size()) != a.batch))
    throw lite::InvalidArgument("q_lens / kv_lens must hold one length per sample");
  a.causal_from_end = spec.contains("causal_from_end") && spec["causal_from_end"].cast<bool>();
  a.causal_offset = i64("causal_offset");
  a.left_window = i64("left_window", -1);
  a.right_window = i64("right_window", -1);
  a.softcap = spec.contains("softcap") ? spec["softcap"].cast<float>() : 0.f;
  a.bf16_products = spec.contains("bf16_products") && spec["bf16_products"].cast<bool>();
  a.kv_elem = static_cast<lite::AttentionElem>(i64("kv_elem"));
  a.kv_block_table = static_cast<const int64_t*>(ptr("kv_block_table"));
  a.kv_block_size = i64("kv_block_size");
  a.kv_blocks_per_seq = i64("kv_blocks_per_seq");
  a.kv_num_blocks = i64("kv_num_blocks");
  a.key_block = i64("key_block");
  a.query_block = i64("query_block");
  a.select_idx = static_cast<const int64_t*>(ptr("select_idx"));
  a.select_num = static_cast<const int64_t*>(ptr("select_num"));
  a.max_selected = i64("max_selected");
  a.lse = static_cast<float*>(ptr("lse"));
  if (a.lse) {
    const auto ls = strides("lse_strides");
    a.lse_batch_stride = ls[0];
    a.lse_head_stride = ls[1];
    a.lse_row_stride = ls[2];
  }
  py::gil_scoped_release release;
  lite::ComputeAttention(a, threads);
}

// lite::ComputeRotary on buffers given as addresses and element strides (see lite_boost/ops/rope.py).
void RotaryFromSpec(const py::dict& spec, int threads) {
  auto i64 = [&](const char* key) { return spec[key].cast<int64_t>(); };
  auto ptr = [&](const char* key) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i64(key))); };
  lite::RotaryArgs a;
  a.elem = static_cast<lite::AttentionElem>(i64("elem"));
  a.x = ptr("x");
  a.out = ptr("out");
  a.batch = i64("batch");
  a.seq = i64("seq");
  a.heads = i64("heads");
  a.dim = i64("dim");
  const auto xs = spec["x_strides"].cast<std::vector<int64_t>>(), os = spec["out_strides"].cast<std::vector<int64_t>>();
  if (xs.size() != 3 || os.size() != 3) throw lite::InvalidArgument("rotary: x_strides and out_strides need 3 strides");
  std::copy(xs.begin(), xs.end(), a.x_strides);
  std::copy(os.begin(), os.end(), a.out_strides);
  a.cos = static_cast<const float*>(ptr("cos"));
  a.sin = static_cast<const float*>(ptr("sin"));
  a.interleaved = spec["interleaved"].cast<bool>();
  py::gil_scoped_release release;
  lite::ComputeRotary(a, threads);
}

// Runs `runner` (a Model or a ModelParallelRunner) on NumPy arrays with the GIL released; the outputs' buffers go to
// NumPy without a copy.
template <typename Runner>
py::list PredictOn(Runner& runner, const std::vector<py::array>& arrays, const std::vector<py::object>& out_arrays) {
  std::vector<lite::TensorView> views;
  std::vector<py::array> keep;   // contiguous copies live until the run ends
  for (const py::array& a : arrays) {
    py::array c = py::array::ensure(a, py::array::c_style);
    if (!c) throw lite::InvalidArgument("input is not convertible to a contiguous array");
    lite::TensorView v;
    v.dtype = FromNumpy(c.dtype());
    v.shape.assign(c.shape(), c.shape() + c.ndim());
    v.data = c.data();
    views.push_back(v);
    keep.push_back(c);
  }
  std::vector<lite::OutputView> storage;   // caller arrays the results go into (None: the runtime's buffer)
  for (size_t j = 0; j < out_arrays.size(); ++j) {
    lite::OutputView v;
    if (!out_arrays[j].is_none()) {
      if (!py::isinstance<py::array>(out_arrays[j]))
        throw lite::TypeMismatch("output storage " + std::to_string(j) + " must be a numpy array or None");
      py::array a = py::reinterpret_borrow<py::array>(out_arrays[j]);
      if (!(a.flags() & py::array::c_style) || !a.writeable())
        throw lite::InvalidArgument("output storage " + std::to_string(j) + " must be a writable C-contiguous array");
      v.dtype = FromNumpy(a.dtype());
      v.shape.assign(a.shape(), a.shape() + a.ndim());
      v.data = a.mutable_data();
    }
    storage.push_back(v);
  }
  std::vector<lite::Tensor> outs;
  {
    py::gil_scoped_release release;
    outs = runner.Predict(views, storage);
  }
  py::list result;
  for (size_t j = 0; j < outs.size(); ++j) {
    lite::Tensor& t = outs[j];
    if (j < out_arrays.size() && !out_arrays[j].is_none()) {   // the caller's own array, now holding the result
      result.append(out_arrays[j]);
      continue;
    }
    auto* holder = new std::shared_ptr<void>(t.buffer);   // the capsule keeps the buffer alive
    py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
    std::vector<py::ssize_t> shape(t.info.shape.begin(), t.info.shape.end());
    result.append(py::array(ToNumpy(t.info.dtype), shape, t.buffer.get(), owner));
  }
  return result;
}

}  // namespace

PYBIND11_MODULE(_lite, m) {
  m.doc() = "lite runtime core (C++)";

  static py::exception<lite::ModelFormatError> format_error(m, "ModelFormatError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lite::ModelFormatError& e) {
      py::set_error(format_error, e.what());
    } catch (const lite::TypeMismatch& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const lite::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const lite::NotSupported& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const lite::OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const lite::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::enum_<lite::DataType>(m, "DataType")
      .value("UNKNOWN", lite::DataType::kUnknown)
      .value("FLOAT32", lite::DataType::kFloat32)
      .value("FLOAT16", lite::DataType::kFloat16)
      .value("BFLOAT16", lite::DataType::kBFloat16)
      .value("INT8", lite::DataType::kInt8)
      .value("UINT8", lite::DataType::kUInt8)
      .value("INT16", lite::DataType::kInt16)
      .value("INT32", lite::DataType::kInt32)
      .value("INT64", lite::DataType::kInt64)
      .value("BOOL", lite::DataType::kBool)
      .value("FLOAT64", lite::DataType::kFloat64)
      .value("UINT16", lite::DataType::kUInt16)
      .value("UINT32", lite::DataType::kUInt32)
      .value("UINT64", lite::DataType::kUInt64);
  py::enum_<lite::Format>(m, "Format")
      .value("DEFAULT", lite::Format::kDefault)
      .value("NCHW", lite::Format::kNCHW)
      .value("NHWC", lite::Format::kNHWC);

  m.def("numpy_dtype", &ToNumpy);
  m.def("gemm_isa", &lite::GemmIsa, "the GEMM micro-kernel ISA picked for this CPU");
  m.def("cpu_features", [] {
    py::dict d;
    d["isa"] = lite::SimdIsaName(lite::DetectSimdIsa());
    d["avx512_vnni"] = lite::CpuHasAvx512Vnni();
    d["avx512_bf16"] = lite::CpuHasAvx512Bf16();
    d["amx_bf16"] = lite::CpuHasAmxBf16();   // tile kernels for bf16 products (granted tile state, not capped)
    d["amx_int8"] = lite::CpuHasAmxInt8();
    d["fp16_arithmetic"] = lite::CpuHasFp16Arithmetic();
    d["arm"] = lite::ArmFeaturesName();   // "neon+dotprod+..." on ARM64, "" elsewhere
    d["fp16_kernels"] = lite::Fp16GemmAvailable();   // preferred_fp16 computes in float16 here
    d["intel"] = lite::CpuIsIntel();
    d["amd_zen4"] = lite::CpuIsAmdZen4();
    d["xeon_conv_rules"] = lite::CpuTakesXeonConvRules();   // the default side of the pixel-tile rule
    d["weight_prefetch_nta"] = lite::WeightPrefetchNonTemporal();   // after LITE_WEIGHT_PREFETCH_NTA
    d["conv_wide_tiles"] = lite::PixelTileConv2D::WideTilesAvailable();   // after LITE_CONV_WIDE_TILES
    d["conv_winograd_blocked"] = lite::WinogradBlockedConv3x3::Enabled();   // after LITE_CONV_WINOGRAD_BLOCKED
    return d;
  }, "the vector ISA the kernels run (after LITE_CPU_ISA) and the AVX-512 / ARMv8 extensions they use");
  m.def("onednn_info", [] {
    py::dict d;
    d["loaded"] = lite::OneDnn() != nullptr;   // loads it on first call (cpu/onednn/onednn_library.h)
    d["status"] = lite::OneDnnStatus();
    d["convolutions"] = lite::OneDnnConvolutionsCreated();
    return d;
  }, "whether oneDNN's library is loaded (status: its version and path, or why not) and how many convolution "
     "primitives lite has created on it");
  m.def("registered_kernels", [](const std::string& target) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [op, dtype] : lite::GetBackend(target).kernels().Entries())
      out.emplace_back(lite::OpName(op), dtype == lite::DataType::kUnknown ? "any" : lite::DataTypeName(dtype));
    return out;
  }, py::arg("target") = "cpu", "(operator, dtype) pairs with a kernel on the target backend");
  m.def("greedy_nms", [](py::array_t<float, py::array::c_style | py::array::forcecast> boxes,
                         py::array_t<float, py::array::c_style | py::array::forcecast> scores, float iou,
                         int64_t max_keep) {
    if (boxes.ndim() != 2 || boxes.shape(1) != 4)
      throw py::value_error("boxes must be [n, 4] (x1, y1, x2, y2)");
    if (scores.ndim() != 1 || scores.shape(0) != boxes.shape(0))
      throw py::value_error("scores must be [n], one per box");
    if (!(iou >= 0.f && iou <= 1.f)) throw py::value_error("iou must lie in [0, 1]");
    std::vector<int64_t> keep;
    {
      py::gil_scoped_release release;
      const std::vector<int64_t> order = lite::ScoreOrder(scores.data(), scores.shape(0), 1, false, 0.f);
      keep = lite::GreedyNms(boxes.data(), order, iou, std::max<int64_t>(0, max_keep));
    }
    py::array_t<int64_t> out(static_cast<py::ssize_t>(keep.size()));
    std::copy(keep.begin(), keep.end(), out.mutable_data());
    return out;
  }, py::arg("boxes"), py::arg("scores"), py::arg("iou"), py::arg("max_keep"),
        "indices kept by greedy NMS (best score first; a box goes when its IoU with a kept one exceeds iou), at most "
        "max_keep: lite/src/cpu/detection/nms.h, the NonMaxSuppression operator's core");
  m.def("resize_bilinear_u8", [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> image,
                                 int64_t height, int64_t width) {
    if (image.ndim() != 3) throw py::value_error("the image must be [height, width, channels] uint8");
    if (height <= 0 || width <= 0) throw py::value_error("the output size must be positive");
    py::array_t<uint8_t> out({static_cast<py::ssize_t>(height), static_cast<py::ssize_t>(width),
                              static_cast<py::ssize_t>(image.shape(2))});
    uint8_t* dst = out.mutable_data();
    {
      py::gil_scoped_release release;
      lite::ResizeBilinearU8(image.data(), image.shape(0), image.shape(1), image.shape(2), dst, height, width);
    }
    return out;
  }, py::arg("image"), py::arg("height"), py::arg("width"),
        "[height, width, C] uint8 from an [H, W, C] uint8 image: bilinear, half-pixel centres, no antialiasing "
        "(OpenCV's INTER_LINEAR), rounded to nearest");
  m.def("measure_fma_peak", &lite::MeasureFmaPeakGflops, py::arg("seconds") = 1.0,
        py::call_guard<py::gil_scoped_release>(),
        "single-thread float32 FMA peak in GFLOP/s (12 independent FMA chains, widest ISA the GEMM uses)");
  m.def("dq_tall_int8_path", &lite::DqTallInt8Path,
        "how dynamic-quant products of more than 8 rows with int8 weights run on this CPU: \"integer\" (int8 "
        "activations) or \"float\" (float32 GEMM on the decoded weights, where integer multiplies are no faster)");
  m.def("dq_tall_int4_path", &lite::DqTallInt4Path,
        "how dynamic-quant products of 32 rows or more with int4 weights run on this CPU: \"integer\" (int8 "
        "activations) or \"bf16\" (AMX-BF16 tiles on the codes decoded per task, activations rounded to bf16)");
  m.def("measure_core_round_trip_ns", &lite::MeasureCoreRoundTripNs, py::arg("cpu_a") = 0, py::arg("cpu_b") = 1,
        py::arg("iterations") = 200000, py::arg("rounds") = 5, py::call_guard<py::gil_scoped_release>(),
        "median round trip (ns) of a cache line bounced between threads pinned to two CPUs; negative where "
        "threads cannot be pinned there");
  m.def("thread_pool_chunks", [](int64_t n, int64_t grain, int threads) {
    lite::ThreadPool pool(threads);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    {
      py::gil_scoped_release release;
      pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(b, e);
      });
    }
    std::sort(ranges.begin(), ranges.end());
    return ranges;
  }, py::arg("n"), py::arg("grain"), py::arg("threads"),
        "the [begin, end) ranges one ParallelFor(n, grain) hands out on a pool of `threads` (sorted; for tests)");
  m.def("dtype_from_numpy", [](py::dtype dt) { return FromNumpy(dt); });
  m.def("attention", &AttentionFromSpec, py::arg("spec"), py::arg("threads") = 1,
        "fused attention on raw buffers described by `spec` (lite_boost's ops build it from tensors)");
  m.def("rotary", &RotaryFromSpec, py::arg("spec"), py::arg("threads") = 1,
        "rotary position embedding on raw buffers described by `spec`");

  py::class_<lite::Context>(m, "CoreContext")
      .def(py::init<>())
      .def_readwrite("target", &lite::Context::target)
      .def_readwrite("thread_num", &lite::Context::thread_num)
      .def_readwrite("bind_cores", &lite::Context::bind_cores)
      .def_readwrite("precision_mode", &lite::Context::precision_mode)
      .def_readwrite("dynamic_quant", &lite::Context::dynamic_quant)
      .def_readwrite("thread_affinity_mode", &lite::Context::thread_affinity_mode)
      .def_readwrite("thread_affinity_core_list", &lite::Context::thread_affinity_core_list);

  py::class_<lite::TensorInfo>(m, "TensorInfo")
      .def_readonly("name", &lite::TensorInfo::name)
      .def_readonly("dtype", &lite::TensorInfo::dtype)
      .def_readonly("shape", &lite::TensorInfo::shape)
      .def_readonly("format", &lite::TensorInfo::format);

  py::class_<lite::Model>(m, "CoreModel")
      .def(py::init<>())
      .def("build_from_file", &lite::Model::BuildFromFile, py::arg("path"), py::arg("context"),
           py::call_guard<py::gil_scoped_release>())
      .def("get_inputs", &lite::Model::GetInputs)
      .def("get_outputs", &lite::Model::GetOutputs)
      .def("metadata", &lite::Model::Metadata)
      .def("arena_bytes", &lite::Model::ArenaBytes)
      .def("compute_precision", &lite::Model::ComputePrecision)
      .def("dynamic_quant", &lite::Model::DynamicQuant)
      .def("channel_blocked_tensors", &lite::Model::ChannelBlockedTensors)
      .def("bf16_pixel_tensors", &lite::Model::Bf16PixelTensors)
      .def("u8_pixel_tensors", &lite::Model::U8PixelTensors)
      .def("set_profiling", &lite::Model::SetProfiling)
      .def("last_profile", [](const lite::Model& model) {
        std::vector<std::tuple<std::string, std::string, double, double, std::string>> out;
        for (const lite::NodeProfile& p : model.LastProfile())
          out.emplace_back(p.name, p.op, p.start_us, p.duration_us, p.kernel);
        return out;
      })
      .def("resize", &lite::Model::Resize, py::call_guard<py::gil_scoped_release>())
      .def("predict", [](lite::Model& model, const std::vector<py::array>& arrays,
                         const std::vector<py::object>& outputs) { return PredictOn(model, arrays, outputs); },
           py::arg("inputs"), py::arg("outputs") = std::vector<py::object>{});

  py::enum_<lite::ModelGroupFlag>(m, "ModelGroupFlag")
      .value("SHARE_WEIGHT", lite::ModelGroupFlag::kShareWeight)
      .value("SHARE_WORKSPACE", lite::ModelGroupFlag::kShareWorkspace)
      .value("SHARE_WEIGHT_WORKSPACE", lite::ModelGroupFlag::kShareWeightWorkspace);

  py::class_<lite::ModelGroup>(m, "CoreModelGroup")
      .def(py::init<lite::ModelGroupFlag>(), py::arg("flags"))
      .def("add_model", &lite::ModelGroup::AddModel)
      .def("flags", &lite::ModelGroup::flags)
      .def("num_models", &lite::ModelGroup::NumModels)
      .def("workspace_bytes", &lite::ModelGroup::WorkspaceBytes)
      .def("shared_weight_bytes", &lite::ModelGroup::SharedWeightBytes);

  py::class_<lite::ModelParallelRunner>(m, "CoreParallelRunner")
      .def(py::init<>())
      .def("init", [](lite::ModelParallelRunner& runner, const std::string& path, const lite::Context& context,
                      int workers_num) {
        lite::RunnerConfig config;
        config.context = context;
        config.workers_num = workers_num;
        py::gil_scoped_release release;
        runner.Init(path, config);
      }, py::arg("path"), py::arg("context"), py::arg("workers_num"))
      .def("workers_num", &lite::ModelParallelRunner::WorkersNum)
      .def("get_inputs", &lite::ModelParallelRunner::GetInputs)
      .def("get_outputs", &lite::ModelParallelRunner::GetOutputs)
      .def("predict", [](lite::ModelParallelRunner& runner, const std::vector<py::array>& arrays,
                         const std::vector<py::object>& outputs) { return PredictOn(runner, arrays, outputs); },
           py::arg("inputs"), py::arg("outputs") = std::vector<py::object>{});
}
