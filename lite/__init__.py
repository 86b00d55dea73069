"""lite: load .ms models and run them (Python API modelled on MindSpore Lite's).

    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = 2
    model = lite.Model()
    model.build_from_file("model.ms", lite.ModelType.MINDIR_LITE, ctx)
    outputs = model.predict([x])            # or {"input": x}, or model.get_inputs() Tensors
    y = outputs[0].get_data_to_numpy()
"""
from __future__ import annotations

import contextlib
import enum
import os
import sys
import warnings
from typing import Iterable, Mapping, Sequence

import numpy as np

# oneDNN's library from PyPI (onednn-cpu-gomp) lies in this environment's lib/: the runtime loads it from there
# when it first needs it (cpu/onednn/onednn_library.h), unless LITE_ONEDNN_LIBRARY says where.
_ONEDNN_WHEEL_LIBRARY = os.path.join(sys.prefix, "lib", "libdnnl.so.3")
if "LITE_ONEDNN_LIBRARY" not in os.environ and os.path.exists(_ONEDNN_WHEEL_LIBRARY):
    os.environ["LITE_ONEDNN_LIBRARY"] = _ONEDNN_WHEEL_LIBRARY

from . import _lite  # noqa: E402
from ._lite import DataType, Format, ModelFormatError

__version__ = "0.1.0"
__all__ = ["Context", "CPUDeviceInfo", "DataType", "Format", "Model", "ModelFormatError", "ModelGroup", "ModelGroupFlag",
           "ModelParallelRunner", "ModelType", "ParallelInfo", "RunnerConfig", "Tensor", "__version__"]


class ModelType(enum.Enum):
    MINDIR_LITE = 4   # the .ms format (MindSpore Lite's value for MINDIR_LITE)


PRECISION_MODES = ("enforce_fp32", "preferred_bf16", "preferred_fp16")


class CPUDeviceInfo:
    """CPU settings: thread_num counts every thread that runs kernels, the caller included. precision_mode:
    "enforce_fp32" (the default), "preferred_bf16" or "preferred_fp16". preferred_bf16 on a CPU with bf16 dot products
    (AVX512_BF16, ARM BF16) runs MatMul/Gemm/Conv with constant weights on bf16 operands with float32 sums
    (compute_precision "bfloat16"); elsewhere it falls back to float32. preferred_fp16 on an ARM64 CPU with FP16
    arithmetic runs them on float16 operands (compute_precision "float16"); elsewhere float32 (see below).
    Model.compute_precision says what a built model computes in.

    dynamic_quant (default False): products with int8/int4-stored weights (weight quantisation) quantise their
    activations to int8 on the fly, one scale per block of depth values, and multiply in integers (AVX512-VNNI or AVX2);
    the scheme of llama.cpp's Q8_0 activations and ONNX Runtime's MatMulNBits accuracy level 4: several times faster
    for prompts and batches, results within the activations' 8-bit rounding. On a CPU without VNNI it has no effect;
    Model.dynamic_quant says whether it is on.

    preferred_fp16 never fails: without fp16 kernels for the CPU it computes in float32, with a RuntimeWarning on a CPU
    that has fp16 arithmetic lite has no kernels for (AVX512-FP16) saying so.

    Affinity (MindSpore Lite's names): thread_affinity_mode 0 (none, the default), 1 (workers pinned to cores counting
    up from the first this process may use) or 2 (counting down from the last); thread_affinity_core_list names the
    cores instead: the pool's worker i (the calling thread being 0) runs on core_list[i % len]; the calling thread is
    never moved. A ModelParallelRunner gives each worker its own stretch of the list. inter_op_parallel_num: lite runs
    a model's operators one after another, each on all thread_num threads; a value above 1 is accepted with a
    RuntimeWarning and has no effect."""

    __slots__ = ("thread_num", "bind_cores", "precision_mode", "dynamic_quant", "thread_affinity_mode",
                 "thread_affinity_core_list", "inter_op_parallel_num")   # a misspelt setting is an error

    def __init__(self, thread_num: int = 1, bind_cores: bool = False, precision_mode: str = "enforce_fp32",
                 dynamic_quant: bool = False, thread_affinity_mode: int = 0,
                 thread_affinity_core_list: Sequence[int] = (), inter_op_parallel_num: int = 1):
        self.thread_num = thread_num
        self.bind_cores = bind_cores
        self.precision_mode = precision_mode
        self.dynamic_quant = dynamic_quant
        self.thread_affinity_mode = thread_affinity_mode
        self.thread_affinity_core_list = list(thread_affinity_core_list)
        self.inter_op_parallel_num = inter_op_parallel_num


class ParallelInfo:
    """ModelParallelRunner's settings: workers_num workers, each running Context.cpu.thread_num threads. 0 (the default):
    as many workers as the CPUs this process may use allow (CPUs // thread_num, at least 1)."""

    __slots__ = ("workers_num",)

    def __init__(self, workers_num: int = 0):
        self.workers_num = workers_num


class Context:
    __slots__ = ("target", "cpu", "parallel")   # settings live on Context.cpu / .parallel; anything else is a typo

    def __init__(self) -> None:
        self.target: list[str] = ["cpu"]
        self.cpu = CPUDeviceInfo()
        self.parallel = ParallelInfo()

    def _core(self) -> _lite.CoreContext:
        if not isinstance(self.cpu.thread_num, int) or self.cpu.thread_num < 1:
            raise ValueError(f"Context.cpu.thread_num must be a positive int, got {self.cpu.thread_num!r}")
        targets = [t.lower() for t in self.target]
        if targets != ["cpu"]:
            raise NotImplementedError(f"Context.target {self.target} is not available; this build has ['cpu']")
        c = _lite.CoreContext()
        c.target = "cpu"
        c.thread_num = self.cpu.thread_num
        c.bind_cores = bool(self.cpu.bind_cores)
        if self.cpu.precision_mode not in PRECISION_MODES:
            raise ValueError(f"Context.cpu.precision_mode must be one of {', '.join(PRECISION_MODES)}, "
                             f"got {self.cpu.precision_mode!r}")
        c.precision_mode = self.cpu.precision_mode
        features = _lite.cpu_features()
        if (self.cpu.precision_mode == "preferred_fp16" and features.get("fp16_arithmetic")
                and not features.get("fp16_kernels")):
            warnings.warn("precision_mode preferred_fp16: this CPU has fp16 arithmetic but lite's float16 kernels "
                          "do not run here (LITE_CPU_ISA caps them); the model computes in float32", RuntimeWarning,
                          stacklevel=3)
        c.dynamic_quant = bool(self.cpu.dynamic_quant)
        mode = self.cpu.thread_affinity_mode
        if not isinstance(mode, int) or isinstance(mode, bool) or mode not in (0, 1, 2):
            raise ValueError(f"Context.cpu.thread_affinity_mode must be 0, 1 or 2, got {mode!r}")
        c.thread_affinity_mode = mode
        cores = list(self.cpu.thread_affinity_core_list or [])
        if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in cores):
            raise ValueError(f"Context.cpu.thread_affinity_core_list must hold core numbers >= 0, got {cores!r}")
        c.thread_affinity_core_list = cores
        inter = self.cpu.inter_op_parallel_num
        if not isinstance(inter, int) or isinstance(inter, bool) or inter < 1:
            raise ValueError(f"Context.cpu.inter_op_parallel_num must be a positive int, got {inter!r}")
        if inter > 1:
            warnings.warn(f"Context.cpu.inter_op_parallel_num={inter}: lite runs operators one after another (each "
                          "on all thread_num threads); the setting has no effect", RuntimeWarning, stacklevel=3)
        return c


class Tensor:
    """A named tensor: model inputs from get_inputs(), results from predict()."""

    def __init__(self, name: str = "", shape: Sequence[int] = (), dtype: DataType = DataType.FLOAT32,
                 format: Format = Format.DEFAULT, data: np.ndarray | None = None):
        self.name = name
        self._shape = list(shape)
        self._dtype = dtype
        self.format = format
        self._data = data

    @property
    def shape(self) -> list[int]:
        return list(self._data.shape) if self._data is not None else list(self._shape)

    @shape.setter
    def shape(self, value: Sequence[int]) -> None:
        self._shape = [int(d) for d in value]
        if self._data is not None and list(self._data.shape) != self._shape:
            self._data = None

    @property
    def dtype(self) -> DataType:
        return self._dtype

    @property
    def element_num(self) -> int:
        return int(np.prod(self.shape)) if all(d >= 0 for d in self.shape) else -1

    @property
    def data_size(self) -> int:
        return self.element_num * np.dtype(_lite.numpy_dtype(self._dtype)).itemsize

    def set_data_from_numpy(self, array: np.ndarray) -> None:
        """The tensor's data. A flat array of exactly the tensor's element count takes its shape (MindSpore Lite's
        quick-start pattern: np.fromfile(...) of a raw input file), when that shape has no dynamic dim."""
        array = np.asarray(array)
        given = _lite.dtype_from_numpy(array.dtype)
        if given != self._dtype and not (self._dtype == DataType.BFLOAT16 and given == DataType.UINT16):
            raise TypeError(f"tensor '{self.name}': expected dtype {self._dtype.name.lower()}, got {array.dtype}")
        if array.ndim == 1 and len(self._shape) > 1 and all(d >= 0 for d in self._shape) \
                and array.size == int(np.prod(self._shape)):
            array = array.reshape(self._shape)
        if len(self._shape) and len(array.shape) != len(self._shape):
            raise ValueError(f"tensor '{self.name}': expected rank {len(self._shape)} (shape {self._shape}), "
                             f"got shape {list(array.shape)}")
        for want, got in zip(self._shape, array.shape):
            if want >= 0 and want != got:
                raise ValueError(f"tensor '{self.name}': expected shape {self._shape} (-1 = any), "
                                 f"got {list(array.shape)}")
        self._data = array

    def get_data_to_numpy(self) -> np.ndarray:
        if self._data is None:
            raise ValueError(f"tensor '{self.name}' has no data")
        return self._data

    def __repr__(self) -> str:
        return f"Tensor(name={self.name!r}, shape={self.shape}, dtype={self._dtype.name.lower()})"


def _tensor_from_info(info: _lite.TensorInfo, data: np.ndarray | None = None) -> Tensor:
    return Tensor(info.name, list(info.shape), info.dtype, info.format, data)


class Model:
    def __init__(self) -> None:
        self._core = _lite.CoreModel()
        self._built = False
        self._input_names: list[str] = []

    def build_from_file(self, model_path: str | os.PathLike, model_type: ModelType = ModelType.MINDIR_LITE,
                        context: Context | None = None, dec_key: str | bytes | None = None,
                        dec_mode: str = "AES-GCM") -> None:
        """Builds from a .ms file. An encrypted one (converter_lite --encryptKey) needs its key as `dec_key` (hex text or
        16/24/32 bytes): it is decrypted into an anonymous in-memory file, never to disk; a wrong key or a changed byte
        is a ValueError."""
        if model_type is not ModelType.MINDIR_LITE:
            raise ValueError(f"model_type must be ModelType.MINDIR_LITE, got {model_type!r}")
        core_context = (context or Context())._core()
        with _readable_model(model_path, dec_key, dec_mode) as path:
            self._core.build_from_file(path, core_context)
        self._built = True
        self._input_names = [i.name for i in self._core.get_inputs()]

    def build_from_buffer(self, model_buffer: bytes | bytearray | memoryview,
                          model_type: ModelType = ModelType.MINDIR_LITE, context: Context | None = None,
                          dec_key: str | bytes | None = None, dec_mode: str = "AES-GCM") -> None:
        """Builds from a .ms file's bytes held in memory (downloaded, decrypted, embedded): the bytes go into an
        anonymous in-memory file (memfd; an unlinked temporary file where there is none) that the runtime maps as it
        maps a file, with the same checks; nothing is left on disk."""
        if not isinstance(model_buffer, (bytes, bytearray, memoryview)):
            raise TypeError(f"model_buffer must be bytes-like, got {type(model_buffer).__name__}")
        data = memoryview(model_buffer).cast("B")
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            fd = os.memfd_create("lite_model", 0)
            path = f"/proc/self/fd/{fd}"
        else:
            import tempfile
            fd, path = tempfile.mkstemp(suffix=".ms")
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                f.write(data)
            self.build_from_file(path, model_type, context, dec_key, dec_mode)   # the mapping keeps the bytes
        finally:
            os.close(fd)
            if not path.startswith("/proc/"):
                os.unlink(path)

    def _require_built(self) -> None:
        if not self._built:
            raise RuntimeError("model is not built; call build_from_file first")

    def get_inputs(self) -> list[Tensor]:
        self._require_built()
        return [_tensor_from_info(i) for i in self._core.get_inputs()]

    def get_outputs(self) -> list[Tensor]:
        self._require_built()
        return [_tensor_from_info(i) for i in self._core.get_outputs()]

    def get_input_by_tensor_name(self, tensor_name: str) -> Tensor:
        """The input named `tensor_name` (MindSpore Lite's name for the lookup); KeyError naming the inputs there
        are otherwise."""
        return self._by_name(self.get_inputs(), tensor_name, "input")

    def get_output_by_tensor_name(self, tensor_name: str) -> Tensor:
        return self._by_name(self.get_outputs(), tensor_name, "output")

    @staticmethod
    def _by_name(tensors: list[Tensor], name: str, kind: str) -> Tensor:
        for t in tensors:
            if t.name == name:
                return t
        raise KeyError(f"the model has no {kind} named {name!r} (its {kind}s: {', '.join(t.name for t in tensors)})")

    def get_metadata(self) -> dict[str, str]:
        self._require_built()
        return dict(self._core.metadata())

    def resize(self, inputs: Sequence[Tensor], dims: Sequence[Sequence[int]]) -> None:
        """Re-plans the model for new input shapes (`dims` in input order)."""
        self._require_built()
        if len(inputs) != len(dims):
            raise ValueError(f"resize got {len(inputs)} inputs but {len(dims)} shapes")
        self._core.resize([[int(d) for d in shape] for shape in dims])
        for t, shape in zip(inputs, dims):
            t.shape = shape

    def predict(self, inputs: Sequence[Tensor] | Sequence[np.ndarray] | Mapping[str, np.ndarray],
                outputs: list | None = None) -> list[Tensor]:
        """Runs the model. Inputs, in input order or as a dict name -> value: NumPy arrays, Tensors, torch tensors or any
        DLPack / array-interface producer in host memory (read in place when C-contiguous).

        outputs (optional): an empty list, which receives the result Tensors, or one entry per output: a Tensor or
        NumPy array holding storage of the result's dtype and shape, which the result is written into (computed there
        directly where the plan allows), a Tensor without data, which receives the result, or None."""
        self._require_built()
        return _run(self._core, self._input_names, inputs, outputs)

    @property
    def compute_precision(self) -> str:
        """The arithmetic float models compute in ("float32", "bfloat16" or "float16"), from Context.cpu.precision_mode
        and this CPU."""
        self._require_built()
        return self._core.compute_precision()

    @property
    def dynamic_quant(self) -> bool:
        """Whether products with int8/int4-stored weights run on dynamically quantised int8 activations
        (Context.cpu.dynamic_quant on a CPU with AVX512-VNNI or AVX2)."""
        self._require_built()
        return self._core.dynamic_quant()

    def channel_blocked_tensors(self) -> list[str]:
        """Diagnostics: intermediate tensors this model's current plan stores channel-blocked (NCHW8c: 8
        channels of a pixel side by side) rather than NCHW. Inputs and outputs are always NCHW."""
        self._require_built()
        return list(self._core.channel_blocked_tensors())

    def bf16_pixel_tensors(self) -> list[str]:
        """Diagnostics: intermediate tensors this model's current plan stores as pixel-major bf16 rows (compute
        precision bfloat16, between Convs that round their inputs to bf16 anyway). Inputs and outputs never are."""
        self._require_built()
        return list(self._core.bf16_pixel_tensors())

    def u8_pixel_tensors(self) -> list[str]:
        """Diagnostics: quantised (uint8) intermediate tensors this model's current plan stores as pixel-major rows
        (between integer Convs on AVX-512 VNNI CPUs, which read them in place). Inputs and outputs never are."""
        self._require_built()
        return list(self._core.u8_pixel_tensors())

    def enable_profiling(self, enabled: bool = True) -> None:
        """Records per-node times of every following predict (costs a clock read per node)."""
        self._require_built()
        self._core.set_profiling(bool(enabled))

    def last_profile(self) -> list[dict]:
        """Per-node times of the last profiled predict, in execution order: dicts with name, op, start_us (from the
        start of the run), duration_us and kernel (the implementation the node ran, e.g. "winograd_f4x4" or
        "pixel_major_bf16_amx"; "" where the operator has one)."""
        self._require_built()
        return [dict(name=n, op=o, start_us=s, duration_us=d, kernel=k) for n, o, s, d, k in self._core.last_profile()]


@contextlib.contextmanager
def _readable_model(model_path: str | os.PathLike, dec_key: str | bytes | None, dec_mode: str = "AES-GCM"):
    """The path the runtime maps for `model_path`: itself, or for an encrypted model an anonymous in-memory file
    holding it decrypted (closed once the runtime has mapped it)."""
    path = os.fspath(model_path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file '{path}' does not exist")
    from . import encryption
    encrypted = encryption.is_encrypted(path)
    if dec_key is None:
        yield path   # an encrypted file is refused by the loader, which says how to pass its key
        return
    if dec_mode.upper() != "AES-GCM":
        raise ValueError(f"dec_mode must be 'AES-GCM', got {dec_mode!r}")
    if not encrypted:
        raise ValueError(f"model file '{path}' is not encrypted, but a dec_key was given")
    fd = encryption.decrypted_fd(path, dec_key)
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _host_array(name: str, item) -> np.ndarray:
    """`item` as a NumPy array over the same memory where it can be: Tensors, arrays, torch tensors, DLPack and
    array-interface producers."""
    if isinstance(item, Tensor):
        item = item.get_data_to_numpy()
    if isinstance(item, np.ndarray):
        return item
    if np.isscalar(item) or isinstance(item, (list, tuple)):
        raise TypeError(f"input '{name}': pass a numpy array, not {type(item).__name__}")
    if type(item).__module__.split(".")[0] == "torch":
        import torch   # the item is a torch tensor: torch is imported already
        t = item.detach()
        if t.device.type != "cpu":
            raise ValueError(f"input '{name}' lives on {t.device}; lite runs on the CPU: pass tensor.cpu()")
        if t.dtype == torch.bfloat16:   # NumPy has no bfloat16: its bits, as the runtime takes them
            return np.from_dlpack(t.view(torch.int16)).view(np.uint16)
        return np.from_dlpack(t)
    if hasattr(item, "__dlpack__"):
        try:
            return np.from_dlpack(item)
        except (BufferError, TypeError, RuntimeError, ValueError) as e:
            raise TypeError(f"input '{name}': {type(item).__name__} cannot be read in host memory through DLPack: {e}") \
                from None
    if hasattr(item, "__array_interface__") or hasattr(item, "__array__"):
        return np.asarray(item)
    raise TypeError(f"input '{name}': expected a numpy array, Tensor, torch tensor or DLPack producer, "
                    f"got {type(item).__name__}")


def _input_arrays(names: list[str], inputs) -> list[np.ndarray]:
    if isinstance(inputs, Mapping):
        if len(inputs) != len(names) or any(n not in inputs for n in names):
            unknown = sorted(set(inputs) - set(names))
            missing = [n for n in names if n not in inputs]
            raise ValueError(f"predict inputs: unknown names {unknown}, missing {missing}; model inputs are {names}")
        items: Iterable = [inputs[n] for n in names]
    elif isinstance(inputs, (list, tuple)):
        items = inputs
    else:
        raise TypeError("predict expects a list of Tensors or numpy arrays, or a dict name -> array")
    if len(items) != len(names):
        raise ValueError(f"model expects {len(names)} inputs {names}, got {len(items)}")
    return [_host_array(name, item) for name, item in zip(names, items)]


def _run(core, input_names: list[str], inputs, outputs: list | None) -> list[Tensor]:
    """predict on a core model or runner: inputs converted, results written into the caller's storage where given."""
    arrays = _input_arrays(input_names, inputs)
    infos = core.get_outputs()
    storage: list = []
    if outputs:
        if len(outputs) != len(infos):
            raise ValueError(f"outputs: the model has {len(infos)} outputs, got {len(outputs)} entries")
        for j, o in enumerate(outputs):
            if isinstance(o, Tensor):
                o = o._data
            if o is not None and not isinstance(o, np.ndarray):
                raise TypeError(f"outputs[{j}]: expected a Tensor, a numpy array or None, got {type(o).__name__}")
            storage.append(o)
    results = core.predict(arrays, storage)
    out = [_tensor_from_info(i, r) for i, r in zip(infos, results)]
    if outputs is None:
        return out
    if not outputs:
        outputs[:] = out
        return out
    for j, o in enumerate(outputs):
        if isinstance(o, Tensor):
            o._data = results[j]
            o._shape = list(results[j].shape)
            out[j] = o
    return out


from .model_pool import ModelGroup, ModelGroupFlag, ModelParallelRunner, RunnerConfig  # noqa: E402

# The generation engine (lite.llm), under MindSpore Lite's names: lite.LLMEngine, lite.LLMReq, lite.LLMEngineStatus,
# lite.LLMRole, lite.SamplingParams. Loaded on first use (lite.llm imports this module).
_LLM_NAMES = ("LLMEngine", "LLMReq", "LLMEngineStatus", "LLMRole", "SamplingParams", "TextEngine")


def __getattr__(name: str):
    if name in _LLM_NAMES:
        from . import llm
        return getattr(llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
