"""Graph passes. Each module does one rewrite and returns how often it fired."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..progress import Progress
from ..ir import Graph
from .activation_fusion import fuse_activations
from .activation_patterns import fuse_gelu
from .attention_fusion import fuse_attention
from .batchnorm_folding import fold_batchnorm
from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .dead_code import remove_dead_nodes
from .dtype_inference import infer_dtypes
from .gated_linear_fusion import fuse_gated_linear_units
from .float16_compute import lower_float16
from .identity_removal import remove_identities
from .layout_cleanup import clean_layout
from .linear_epilogue import fold_linear_epilogues
from .matmul_rewrites import rewrite_unit_k_matmul
from .norm_fusion import fuse_layer_norm, fuse_rms_norm
from .pad_folding import fold_pads_into_conv
from .qkv_merge import merge_qkv_projections
from .residual_fusion import fuse_residual_add
from .rotary_fusion import fuse_rotary_embedding
from .static_shapes import complete_static_shapes

OPTIMIZE_LEVELS = ("none", "general")


@dataclass
class PassReport:
    fired: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def run_pipeline(graph: Graph, optimize: str = "general", quiet: bool = False) -> PassReport:
    if optimize not in OPTIMIZE_LEVELS:
        raise ValueError(f"optimize must be one of {OPTIMIZE_LEVELS}, got '{optimize}'")
    # float16 lowering is required (the CPU kernels are float32), so it runs at every level.
    passes = [("dtype_inference", infer_dtypes), ("float16_compute", lower_float16), ("dtype_inference", infer_dtypes)]
    if optimize == "general":
        passes += [
            ("identity_removal", remove_identities),
            ("constant_folding", fold_constants),
            ("cse", eliminate_common_subexpressions),
            ("unit_k_matmul", rewrite_unit_k_matmul),
            ("layout_cleanup", clean_layout),
            ("gelu_fusion", fuse_gelu),
            ("layer_norm_fusion", fuse_layer_norm),
            ("rms_norm_fusion", fuse_rms_norm),
            ("rotary_fusion", fuse_rotary_embedding),
            ("linear_epilogue", fold_linear_epilogues),
            ("batchnorm_folding", fold_batchnorm),
            ("pad_folding", fold_pads_into_conv),
            ("static_shapes", complete_static_shapes),
            ("residual_fusion", fuse_residual_add),
            ("attention_fusion", fuse_attention),
            ("dead_code", remove_dead_nodes),
            ("qkv_merge", merge_qkv_projections),
            ("activation_fusion", fuse_activations),
            ("gated_linear_fusion", fuse_gated_linear_units),
            ("dead_code", remove_dead_nodes),
            ("dtype_inference", infer_dtypes),
        ]
    report = PassReport()
    from ..writer import subgraphs
    for node in graph.nodes:   # bodies first: the node's output dtypes come from them
        for sub in subgraphs(node):
            run_pipeline(sub, optimize, quiet=True)
    with Progress(f"optimising '{graph.name}'", len(passes), enabled=not quiet) as progress:
        for name, fn in passes:
            t0 = time.perf_counter()
            count = fn(graph)
            report.fired[name] = report.fired.get(name, 0) + count
            report.seconds[name] = report.seconds.get(name, 0.0) + time.perf_counter() - t0
            progress.step(f"{name}: fired {count}")
    graph.topological_sort()
    graph.remove_unused_tensors()
    return report
