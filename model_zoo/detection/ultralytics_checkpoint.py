"""Reads an ultralytics checkpoint (yolov8n.pt, yolov10x.pt ...) without the ultralytics package.

Those files are torch.save'd pickles of the whole model object ({"model": DetectionModel, "ema": ..., "train_args":
...}), so torch.load needs ultralytics' classes, and its weights_only mode refuses them. Here the pickle is read with
an unpickler that builds no class it does not know: torch's tensor rebuilders, containers and numpy scalars are
real, and every other class or function named in the file (ultralytics' modules, torch.nn's, dill's helpers)
becomes an inert `PickledObject` that only records the state pickle gives it. Nothing in the file is executed. The
model's tensors are then collected the way nn.Module.state_dict names them, from each object's `_parameters`,
`_buffers` and `_modules`, together with the model yaml, the class names, the strides and each BatchNorm's eps.

A checkpoint that is a plain state dict (torch.save(model.state_dict())) or a .safetensors file needs the model
yaml beside it (`<name>.yaml`, ultralytics' own format)."""
from __future__ import annotations

import collections
import io
import os
import pickle
from typing import Any

import numpy as np

from converter.ir import ConverterError


class PickledObject:
    """A stand-in for an unknown class: pickle's NEWOBJ / REDUCE create it, BUILD fills `__dict__` (or `state`)."""
    qualified_name = "?"

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}   # (dict, slots) form
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    def __repr__(self) -> str:
        return f"<pickled {self.qualified_name}>"


_STAND_INS: dict[str, type] = {}


def _stand_in(module: str, name: str) -> type:
    key = f"{module}.{name}"
    if key not in _STAND_INS:
        _STAND_INS[key] = type(name, (PickledObject,), {"qualified_name": key})
    return _STAND_INS[key]


def _allowed() -> dict[tuple[str, str], Any]:
    import torch
    import torch._utils
    allowed = {("collections", "OrderedDict"): collections.OrderedDict,
               ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
               ("builtins", "complex"): complex, ("torch", "Size"): torch.Size, ("torch", "device"): torch.device}
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
                 "_rebuild_parameter_with_state"):
        if hasattr(torch._utils, name):
            allowed[("torch._utils", name)] = getattr(torch._utils, name)
    for name in dir(torch):   # dtypes (torch.float16 pickles as ("torch", "float16"))
        if isinstance(getattr(torch, name, None), torch.dtype):
            allowed[("torch", name)] = getattr(torch, name)
    allowed[("numpy", "dtype")] = np.dtype
    allowed[("numpy.core.multiarray", "scalar")] = _numpy_scalar
    allowed[("numpy._core.multiarray", "scalar")] = _numpy_scalar
    allowed[("numpy.core.multiarray", "_reconstruct")] = _numpy_reconstruct
    allowed[("numpy._core.multiarray", "_reconstruct")] = _numpy_reconstruct
    allowed[("_codecs", "encode")] = _latin1_bytes
    allowed[("copyreg", "_reconstructor")] = _reconstruct_object
    return allowed


def _reconstruct_object(cls, base, state=None):   # protocol 0/1's object pickles: only stand-ins are built
    if not (isinstance(cls, type) and issubclass(cls, PickledObject)):
        raise pickle.UnpicklingError(f"copyreg._reconstructor of {cls!r} is not a data constructor")
    return cls.__new__(cls)


def _numpy_scalar(dtype, data=None):
    if data is None or not isinstance(dtype, np.dtype) or dtype.hasobject:
        return PickledObject(dtype, data)
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _numpy_reconstruct(*args):   # an ndarray's pickle: its state arrives by __setstate__, kept opaque
    return PickledObject(*args)


def _latin1_bytes(text, encoding="latin1"):
    if encoding != "latin1" or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r} is not a data constructor")
    return text.encode("latin1")


class _InertUnpickler(pickle.Unpickler):
    _ALLOWED: dict | None = None

    def find_class(self, module: str, name: str):
        if _InertUnpickler._ALLOWED is None:
            _InertUnpickler._ALLOWED = _allowed()
        found = _InertUnpickler._ALLOWED.get((module, name))
        return found if found is not None else _stand_in(module, name)


class _InertPickleModule:
    """What torch.load takes as pickle_module: its Unpickler subclass keeps torch's storage handling."""
    Unpickler = _InertUnpickler
    load = staticmethod(lambda f, **kw: _InertUnpickler(f, **kw).load())
    __name__ = "inert_pickle"


def _module_state(obj: Any, prefix: str, tensors: dict, eps: dict, seen: set) -> None:
    import torch
    if id(obj) in seen or not isinstance(obj, PickledObject):
        return
    seen.add(id(obj))
    d = obj.__dict__
    for group in ("_parameters", "_buffers"):
        for name, value in (d.get(group) or {}).items():
            if value is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise ConverterError(f"'{prefix}{name}' is a {type(value).__name__}, not a tensor")
            tensors[prefix + name] = value
    if obj.qualified_name.endswith(("BatchNorm2d", "BatchNorm1d")) and "eps" in d:
        eps[prefix.rstrip(".")] = float(d["eps"])
    for name, child in (d.get("_modules") or {}).items():
        if child is not None:
            _module_state(child, f"{prefix}{name}.", tensors, eps, seen)


def _yaml_beside(path: str) -> dict | None:
    import yaml
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    stem = None if os.path.isdir(path) else os.path.splitext(os.path.basename(path))[0]
    candidates = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml")))
    named = [f for f in candidates if stem and os.path.splitext(f)[0] == stem]
    pick = named or candidates
    if len(pick) != 1:
        return None
    with open(os.path.join(folder, pick[0])) as f:
        try:
            return yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConverterError(f"{pick[0]}: not valid YAML ({e})") from None


def _find_weights_file(path: str) -> str:
    if not os.path.isdir(path):
        if not os.path.isfile(path):
            raise ConverterError(f"{path}: no such checkpoint")
        return path
    files = sorted(f for f in os.listdir(path) if f.endswith((".pt", ".pth", ".safetensors")))
    if len(files) != 1:
        raise ConverterError(f"{path}: expected one .pt / .safetensors checkpoint in the directory, found "
                             f"{files or 'none'}")
    return os.path.join(path, files[0])


def _load_pickle(path: str) -> Any:
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_InertPickleModule)
    except ConverterError:
        raise
    except Exception as e:   # truncated zip, not a torch file, a pickle opcode our unpickler refuses
        raise ConverterError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from None


def read_ultralytics(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors by state-dict name as float32 arrays, info) of an ultralytics checkpoint. info: "yaml" (the model
    yaml as a dict), "names" (class names, index order, when the file has them), "strides" (the Detect head's, when
    recorded), "bn_eps" (BatchNorm eps by module name), "imgsz" (the training image size, when recorded)."""
    import torch
    file = _find_weights_file(path)
    info: dict[str, Any] = {}
    if file.endswith(".safetensors"):
        from safetensors.numpy import load_file
        try:
            arrays = load_file(file)
        except Exception as e:
            raise ConverterError(f"{file}: not a readable safetensors file ({type(e).__name__}: {e})") from None
        tensors = {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}
        eps = {}
    else:
        root = _load_pickle(file)
        model = None
        if isinstance(root, dict) and not all(isinstance(v, torch.Tensor) for v in root.values()):
            model = root.get("ema") or root.get("model")
            args = root.get("train_args")
            if isinstance(args, dict) and isinstance(args.get("imgsz"), int):
                info["imgsz"] = int(args["imgsz"])
        elif isinstance(root, PickledObject):
            model = root
        if model is not None:
            if not isinstance(model, PickledObject):
                raise ConverterError(f"{file}: its 'model' entry is a {type(model).__name__}, not a pickled model")
            tensors, eps = {}, {}
            _module_state(model, "", tensors, eps, set())
            d = model.__dict__
            if isinstance(d.get("yaml"), dict):
                info["yaml"] = d["yaml"]
            names = d.get("names")
            if isinstance(names, dict):
                info["names"] = [str(names[k]) for k in sorted(names)]
            elif isinstance(names, (list, tuple)):
                info["names"] = [str(n) for n in names]
            stride = d.get("stride")
            if isinstance(stride, torch.Tensor):
                info["strides"] = [int(s) for s in stride.tolist()]
        elif isinstance(root, dict):
            tensors, eps = dict(root), {}
        else:
            raise ConverterError(f"{file}: holds a {type(root).__name__}, not an ultralytics checkpoint")
    if "yaml" not in info:
        found = _yaml_beside(path)
        if found is None:
            raise ConverterError(f"{file}: a state dict without its model; put the model yaml (e.g. yolov8n.yaml) "
                                 "beside it")
        info["yaml"] = found
    info["bn_eps"] = eps
    if not tensors:
        raise ConverterError(f"{file}: no tensors found")
    prefixed = {k[len("model."):] if k.startswith("model.model.") else k: v for k, v in tensors.items()}
    arrays = {k: v.detach().float().numpy() for k, v in prefixed.items() if v.is_floating_point()}
    return arrays, info
