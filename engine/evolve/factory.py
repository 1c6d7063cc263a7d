"""Choose and build the evaluator a session uses, from the config's [eval] and [executor] sections (flags have
already been merged into them): the local pipelined executor by default, a Ray cluster when asked.

Lazy imports: the Ray executor, only when the config asks for it: Ray is optional and takes about half a second
to import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import KbenchError
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.harness.glue_warm import warm_glue_in_background
from engine.pipeline.eval_types import EvalOptions

# The one builder of EvalOptions from the config, kept importable from here where sessions always took it
from engine.pipeline.eval_types import options_from_config as eval_options  # noqa: F401

if TYPE_CHECKING:
    from engine.config.sections import Config
    from engine.evolve.outcome import Evaluator
    from engine.tasks.model import Task


def parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise KbenchError(f"gpus {text!r}: give GPU indices like 0,1") from None


def make_evaluator(task: Task, direction: str, config: Config, options: EvalOptions | None = None, *,
                   sequential: bool = False) -> Evaluator:
    """The configured executor for one task direction. Raises KbenchError with the cause in one paragraph
    (Ray missing or unreachable, a cluster without GPUs)."""
    opts = options if options is not None else eval_options(config)
    ex = config.executor
    if ex.kind == "ray":
        if sequential:
            raise KbenchError("--sequential is a local-executor mode; the Ray executor schedules on the cluster")
        try:
            from engine.evolve.ray.executor import RayExecutor
        except ImportError as exc:
            raise KbenchError(f"the Ray executor is not available here: {exc}") from None
        return RayExecutor(task, direction, opts, address=ex.ray_address, retries=ex.retries,
                           compile_on_cluster=ex.compile_on_cluster, build_cpus=ex.build_cpus,
                           ship_code=ex.ship_code if ex.ray_address else False)
    # the task's generated binding.o, compiled while the first proposals are written, so that the first kernel-only
    # candidate (kernel.cu alone) builds as fast as the later ones; nothing when the PCH is not built yet
    warm_glue_in_background(task, direction, opts.cache_root)
    return LocalPipelineExecutor(task, direction, opts, gpus=parse_gpus(ex.gpus), build_workers=ex.build_workers,
                                 pipelined=not sequential)
