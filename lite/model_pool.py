"""Serving one model to many threads, and models that share memory (MindSpore Lite's ModelParallelRunner and
ModelGroup).

    ctx = lite.Context()
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 2
    runner = lite.ModelParallelRunner()
    runner.build_from_file("resnet50.ms", ctx)
    y = runner.predict([x])[0].get_data_to_numpy()     # from any number of threads at once
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from . import _lite
from . import Context, Model, ModelType, Tensor, _readable_model, _run, _tensor_from_info

ModelGroupFlag = _lite.ModelGroupFlag


class RunnerConfig:
    """MindSpore Lite 1.x's runner settings: `context` for every worker (Context.cpu.thread_num threads each) and
    `workers_num` (None: context.parallel.workers_num)."""

    def __init__(self, context: Context | None = None, workers_num: int | None = None):
        self.context = context or Context()
        self.workers_num = workers_num


class ModelParallelRunner:
    """A pool of workers serving one model: predict may be called from many threads at once; each call waits for a free
    worker (first come, first served) and runs there with the GIL released. The workers share one copy of the weights
    (the file mapping and every packed weight); each has its own activation memory and Context.cpu.thread_num threads,
    the calling thread counting as one. A plain Model is safe to share between threads too, but runs one predict at a
    time."""

    def __init__(self) -> None:
        self._core: _lite.CoreParallelRunner | None = None
        self._model_path = ""
        self._input_names: list[str] = []

    def build_from_file(self, model_path: str | os.PathLike, context: Context | None = None,
                        dec_key: str | bytes | None = None, dec_mode: str = "AES-GCM") -> None:
        """Builds context.parallel.workers_num workers (an encrypted model: its key as `dec_key`, as Model's)."""
        context = context or Context()
        if not isinstance(context, Context):
            raise TypeError(f"context must be a lite.Context, got {type(context).__name__}")
        self._build(model_path, context, context.parallel.workers_num, dec_key, dec_mode)

    def init(self, model_path: str | os.PathLike, runner_config: RunnerConfig | None = None) -> None:
        """MindSpore Lite 1.x's name for build_from_file, with a RunnerConfig."""
        config = runner_config or RunnerConfig()
        if not isinstance(config, RunnerConfig):
            raise TypeError(f"runner_config must be a lite.RunnerConfig, got {type(config).__name__}")
        workers = config.workers_num if config.workers_num is not None else config.context.parallel.workers_num
        self._build(model_path, config.context, workers)

    def _build(self, model_path, context: Context, workers_num, dec_key=None, dec_mode: str = "AES-GCM") -> None:
        path = os.fspath(model_path)
        if not isinstance(workers_num, int) or isinstance(workers_num, bool) or workers_num < 0:
            raise ValueError(f"workers_num must be an int >= 0 (0: as many as the CPUs allow), got {workers_num!r}")
        core = _lite.CoreParallelRunner()
        core_context = context._core()
        with _readable_model(path, dec_key, dec_mode) as readable:
            core.init(readable, core_context, workers_num)
        self._core = core
        self._model_path = path
        self._input_names = [i.name for i in core.get_inputs()]

    def _require_built(self) -> _lite.CoreParallelRunner:
        if self._core is None:
            raise RuntimeError("the runner is not built; call build_from_file first")
        return self._core

    @property
    def workers_num(self) -> int:
        return self._require_built().workers_num()

    def get_inputs(self) -> list[Tensor]:
        return [_tensor_from_info(i) for i in self._require_built().get_inputs()]

    def get_outputs(self) -> list[Tensor]:
        return [_tensor_from_info(i) for i in self._require_built().get_outputs()]

    def predict(self, inputs: Sequence[Tensor] | Sequence[np.ndarray] | Mapping[str, np.ndarray],
                outputs: list | None = None) -> list[Tensor]:
        """As Model.predict; thread safe."""
        return _run(self._require_built(), self._input_names, inputs, outputs)

    def __str__(self) -> str:
        return f"model_path: {self._model_path}."


class ModelGroup:
    """Models that share memory. SHARE_WEIGHT: a constant a member's file holds that is equal (shape, dtype, bytes) to
    one another member loaded already is packed once for both: an LLM's prompt and decode graphs, or one network
    converted for several input shapes, keep one copy of their weights. SHARE_WORKSPACE: the members run on one
    activation arena, sized for the largest, and so one at a time. Add the Models before building them.

    add_model also takes file paths (MindSpore Lite's workspace form): cal_max_size_of_workspace then reports the
    largest activation arena those models need."""

    def __init__(self, flags: ModelGroupFlag = ModelGroupFlag.SHARE_WORKSPACE):
        if not isinstance(flags, ModelGroupFlag):
            raise TypeError(f"flags must be a lite.ModelGroupFlag, got {type(flags).__name__}")
        self._core = _lite.CoreModelGroup(flags)
        self._paths: list[str] = []
        self._models: list[Model] = []

    @property
    def flags(self) -> ModelGroupFlag:
        return self._core.flags()

    def add_model(self, models: Sequence[Model] | Sequence[str]) -> None:
        if not isinstance(models, (list, tuple)):
            raise TypeError(f"models must be a list or tuple of Models or paths, got {type(models).__name__}")
        if all(isinstance(m, Model) for m in models):
            for m in models:
                if m._built:
                    raise RuntimeError("ModelGroup.add_model: a model is built already; add models before building "
                                       "them")
                self._core.add_model(m._core)
                self._models.append(m)
        elif all(isinstance(m, (str, os.PathLike)) for m in models):
            self._paths.extend(os.fspath(m) for m in models)
        else:
            raise TypeError("models must all be lite.Model objects or all be paths")

    def cal_max_size_of_workspace(self, model_type: ModelType = ModelType.MINDIR_LITE,
                                  context: Context | None = None) -> int:
        """The largest activation arena (bytes) of the models added as paths (each built here with `context` at its
        declared input shapes) and of the member Models built so far."""
        if model_type is not ModelType.MINDIR_LITE:
            raise TypeError(f"model_type must be ModelType.MINDIR_LITE, got {model_type!r}")
        sizes = [self._core.workspace_bytes()]
        for path in self._paths:
            probe = Model()
            probe.build_from_file(path, model_type, context)
            sizes.append(probe._core.arena_bytes())
        sizes.extend(m._core.arena_bytes() for m in self._models if m._built)
        return max(sizes)

    @property
    def workspace_bytes(self) -> int:
        """The shared workspace's size now (SHARE_WORKSPACE): the largest plan of a member so far."""
        return self._core.workspace_bytes()

    @property
    def shared_weight_bytes(self) -> int:
        """Bytes of members' constants found equal to a constant of a member loaded before (SHARE_WEIGHT)."""
        return self._core.shared_weight_bytes()
