"""The accuracy report of a compressed model: per output, cosine similarity and max/mean abs error of the
compressed model against the float model, both run in the lite runtime on the same inputs (the calibration
set when the config names one, seeded random inputs otherwise), and the file sizes."""
from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np

from ..ir import ConverterError, Graph, Tensor
from ..progress import Progress
from ..writer import INT8_COMPUTE, ms_in_memory
from .config import QuantConfig

RANDOM_SAMPLES = 4


def _input_specs(graph: Graph) -> dict[str, tuple[np.dtype, list[int]]]:
    specs = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        if t.shape is None or any(d < 0 for d in t.shape):
            raise ConverterError(f"the accuracy report needs fixed input shapes: '{name}' is {t.shape} "
                                 "(pass --inputShape, or calibration data)")
        specs[name] = (np.dtype(t.dtype), list(t.shape))
    return specs


def _load_file(path: str, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    if path.endswith(".npy"):
        a = np.load(path)
    else:
        a = np.fromfile(path, dtype=dtype)
        if a.size != int(np.prod(shape)):
            raise ConverterError(f"calibration file '{path}' holds {a.size} values of {dtype}, input shape "
                                 f"{shape} needs {int(np.prod(shape))}")
        a = a.reshape(shape)
    if a.dtype != dtype:
        raise ConverterError(f"calibration file '{path}' is {a.dtype}, the input is {dtype}")
    return a


def sample_inputs(graph: Graph, cfg: QuantConfig | None) -> tuple[list[dict[str, np.ndarray]], str]:
    """The inputs the report runs: (samples, where they came from)."""
    if cfg is not None and cfg.calibrate_path:
        missing = [n for n in graph.inputs if n not in cfg.calibrate_path]
        if missing:
            raise ConverterError(f"calibrate_path names no directory for input(s) {missing}")
        specs = {n: (np.dtype(graph.tensors[n].dtype), graph.tensors[n].shape) for n in graph.inputs}
        files = {}
        for name, directory in cfg.calibrate_path.items():
            ext = "*.npy" if cfg.input_type == "NPY" else "*.bin"
            found = sorted(glob.glob(os.path.join(directory, ext)))
            if not found:
                raise ConverterError(f"calibration directory '{directory}' has no {ext} files")
            files[name] = found[:cfg.calibrate_size] if cfg.calibrate_size else found
        count = min(len(v) for v in files.values())
        samples = [{n: _load_file(files[n][i], *specs[n]) for n in graph.inputs} for i in range(count)]
        return samples, f"{count} calibration samples"
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(RANDOM_SAMPLES):
        feeds = {}
        for name, (dtype, shape) in _input_specs(graph).items():
            if np.issubdtype(dtype, np.floating):
                feeds[name] = rng.standard_normal(shape).astype(dtype)
            elif dtype == np.bool_:
                feeds[name] = np.ones(shape, np.bool_)
            else:
                feeds[name] = rng.integers(0, 10, shape).astype(dtype)
        samples.append(feeds)
    return samples, f"{RANDOM_SAMPLES} seeded random samples (give calibrate_path for representative figures)"


def _run(path: str, samples: list[dict[str, np.ndarray]], dec_key: bytes | None = None,
         label: str = "running samples") -> list[list[np.ndarray]]:
    import lite
    ctx = lite.Context()
    model = lite.Model()
    model.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx, dec_key=dec_key)
    results = []
    with Progress(label, len(samples)) as progress:
        for feeds in samples:
            results.append([t.get_data_to_numpy() for t in model.predict(feeds)])
            progress.step()
    return results


def run_samples(path: str, samples: list[dict[str, np.ndarray]], outputs: list[str]) -> list[dict[str, np.ndarray]]:
    """Runs a .ms file on each sample: its outputs by name (`outputs`: the graph's output names, in order)."""
    return [dict(zip(outputs, values)) for values in _run(path, samples, label="calibration samples")]


def float_tensor(t: Tensor, originals: dict[str, np.ndarray]) -> Tensor:
    """The float model's version of a tensor: its original constant value, float32 instead of uint8 codes."""
    if t.act_quant is not None:
        return dataclasses.replace(t, dtype=np.dtype(np.float32), act_quant=None)
    return dataclasses.replace(t, stored=None, data=originals.get(t.name, t.data))


def accuracy_report(graph: Graph, originals: dict[str, np.ndarray], quant_path: str, cfg: QuantConfig | None,
                    compressed: int, dec_key: bytes | None = None) -> dict:
    """Runs the float model (the graph with the `originals` values of its compressed constants, written to an
    anonymous in-memory file) and the compressed file (encrypted: `dec_key`) on the same samples."""
    samples, source = sample_inputs(graph, cfg)
    plain = dataclasses.replace(graph, tensors={n: float_tensor(t, originals) for n, t in graph.tensors.items()},
                                nodes=[dataclasses.replace(n, attrs={k: v for k, v in n.attrs.items() if k != INT8_COMPUTE})
                                       for n in graph.nodes])
    with ms_in_memory(plain) as (float_path, float_size):   # in memory: no float copy of the model on disk
        ref = _run(float_path, samples, label="accuracy: float model")
    got = _run(quant_path, samples, dec_key, label="accuracy: written model")
    outputs = []
    for k, name in enumerate(graph.outputs):
        a = np.concatenate([r[k].astype(np.float64).ravel() for r in ref])
        b = np.concatenate([g[k].astype(np.float64).ravel() for g in got])
        denom = np.linalg.norm(a) * np.linalg.norm(b)
        cosine = float(a @ b / denom) if denom > 0 else float(np.array_equal(a, b))
        err = np.abs(a - b)
        outputs.append({"output": name, "cosine": cosine, "max_abs_error": float(err.max(initial=0.0)),
                        "mean_abs_error": float(err.mean()) if err.size else 0.0,
                        "max_abs_reference": float(np.abs(a).max(initial=0.0))})
    quant_size = os.path.getsize(quant_path)
    return {"inputs": source, "compressed_tensors": compressed, "outputs": outputs,
            "file_bytes_float": float_size, "file_bytes": quant_size, "size_ratio": quant_size / float_size}


def format_report(r: dict) -> str:
    lines = [f"accuracy vs the float model on {r['inputs']}:"]
    for o in r["outputs"]:
        lines.append(f"  {o['output']}: cosine {o['cosine']:.6f}, max abs error {o['max_abs_error']:.3g}, "
                     f"mean abs error {o['mean_abs_error']:.3g} (max abs output {o['max_abs_reference']:.3g})")
    lines.append(f"file size: {r['file_bytes_float']} -> {r['file_bytes']} bytes ({r['size_ratio']:.3f}x), "
                 f"{r['compressed_tensors']} weights compressed")
    return "\n".join(lines)
