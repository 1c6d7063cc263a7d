"""Load a native task folder: task.toml + reference.py (see docs/formats.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from engine import userfiles
from engine.errors import TaskError
from engine.tasks import costexpr, pysource, reference_checks, toml_checks
from engine.tasks.inits import SCHEMES
from engine.tasks.model import ALL_CONFIGS, DTYPE_BYTES, Cost, DirectionSpec, Task, TaskConfig, Tolerance
from engine.tasks.policies import POLICIES

DIRECTIONS = ("forward", "backward")


def is_native_task(path: Path) -> bool:
    return (path / "task.toml").is_file() and (path / "reference.py").is_file()


def load_native(root: Path) -> Task:
    toml_path = root / "task.toml"
    ref_path = root / "reference.py"
    try:     # a task is the user's own: a link is followed, but a binary or special file is one line
        meta = tomllib.loads(userfiles.read_text(toml_path, error=TaskError, follow_links=True))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{toml_path}: not valid TOML ({exc}).") from None
    toml_checks.check_meta(meta, toml_path)   # unknown keys, numbers written as strings, too few configs

    def need(obj: dict, key: str, where: str) -> Any:
        if key not in obj:
            raise TaskError(f"{toml_path}: missing required key `{key}` in {where}.")
        return obj[key]

    name = str(meta.get("name") or root.name)
    dtype = str(meta.get("dtype", "float32"))
    if dtype not in DTYPE_BYTES:
        raise TaskError(f"{toml_path}: dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}.")
    directions = list(need(meta, "directions", "the top level"))
    bad = [d for d in directions if d not in DIRECTIONS]
    if bad or not directions:
        raise TaskError(f"{toml_path}: `directions` must list forward and/or backward, got {directions!r}.")

    module = pysource.parse_module(ref_path)
    fn_params = pysource.function_params(module, "forward_fn", ref_path)
    model_params = pysource.class_init_params(module, "Model", ref_path)
    input_params = pysource.function_params(module, "get_inputs", ref_path)
    defaults = pysource.literal_defaults(module)

    specs: dict[str, DirectionSpec] = {}
    for d in directions:
        section = need(meta, d, "the top level (one table per direction)")
        specs[d] = DirectionSpec(
            direction=d,
            signature=str(need(section, "signature", f"[{d}]")),
            tolerance=Tolerance(float(need(section, "atol", f"[{d}]")), float(need(section, "rtol", f"[{d}]"))),
            reference_path=ref_path,
            max_mismatch_fraction=float(section.get("max_mismatch_fraction", 0.0)),
            no_grad=_no_grad_positions(section.get("no_grad", []), fn_params, f"{toml_path}: [{d}]"),
            cost_formulas=(str(section["flops"]), str(section["bytes"])) if "flops" in section and "bytes" in section
            else (),
            autograd_backward=d == "backward" and reference_checks.defines_autograd_function(module),
        )

    # Model.forward calls fn with what the signature lists; get_inputs feeds Model.forward (checked on the tree)
    reference_checks.check_reference(module, ref_path.read_text(), ref_path, toml_path,
                                     {d: s.signature for d, s in specs.items()},
                                     autograd_backward="backward" in specs and specs["backward"].autograd_backward)

    raw_configs = need(meta, "configs", "the top level (a [[configs]] array)")
    if not isinstance(raw_configs, list) or len(raw_configs) < 1:
        raise TaskError(f"{toml_path}: `configs` must be a non-empty [[configs]] array.")
    configs = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_configs):
        where = f"[[configs]] #{i + 1}"
        cname = str(need(raw, "name", where))
        if cname in seen:
            raise TaskError(f"{toml_path}: two configs are named {cname!r}; names must be unique.")
        if cname == ALL_CONFIGS:
            raise TaskError(f"{toml_path}: {where} is named {ALL_CONFIGS!r}, which --time-config and [eval] "
                            "timing_configs read as every config; give it another name.")
        seen.add(cname)
        args = dict(need(raw, "args", where))
        model_kwargs, input_kwargs = route_args(args, model_params, input_params, f"{toml_path}: {where} ({cname})")
        init = str(raw.get("init", "normal"))
        if init not in SCHEMES:
            raise TaskError(f"{toml_path}: {where} ({cname}) has init {init!r}; known: {', '.join(SCHEMES)}.")
        names = {**defaults, **args, "dtype_bytes": DTYPE_BYTES[dtype]}
        cost = {}
        for d in directions:
            section = meta[d]
            if "flops" in section and "bytes" in section:
                try:
                    cost[d] = Cost(costexpr.evaluate(str(section["flops"]), names),
                                   costexpr.evaluate(str(section["bytes"]), names))
                except costexpr.CostExprError as exc:
                    raise TaskError(f"{toml_path}: [{d}] cost model, config {cname!r}: {exc}.") from None
        tags = raw.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise TaskError(f"{toml_path}: {where} ({cname}): `tags` must be a list of strings, got {tags!r}.")
        configs.append(TaskConfig(name=cname, model_kwargs=model_kwargs, input_kwargs=input_kwargs,
                                  seed=int(raw.get("seed", 0)), init=init, cost=cost, tags=tuple(tags)))

    policy = meta.get("library_policy")
    if policy is not None and policy not in POLICIES:
        raise TaskError(f"{toml_path}: library_policy {policy!r} is not one of {', '.join(POLICIES)}.")
    return Task(name=name, root=root.resolve(), format="native", description=str(meta.get("description", "")),
                tags=tuple(meta.get("tags", ())), dtype=dtype, directions=specs, configs=tuple(configs),
                library_policy=policy)


def _no_grad_positions(names: list[str], fn_params: pysource.Params, where: str) -> tuple[int, ...]:
    unknown = [n for n in names if n not in fn_params.names]
    if unknown:
        raise TaskError(f"{where}: no_grad names {unknown}, which are not forward_fn parameters "
                        f"({', '.join(fn_params.names)}).")
    return tuple(fn_params.names.index(n) for n in names)


def route_args(args: dict[str, Any], model: pysource.Params, inputs: pysource.Params,
               where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send each arg to Model.__init__, get_inputs, or both, by their parameter names."""
    model_kwargs: dict[str, Any] = {}
    input_kwargs: dict[str, Any] = {}
    for key, value in args.items():
        to_model = key in model.names
        to_inputs = key in inputs.names
        if not (to_model or to_inputs):
            raise TaskError(f"{where}: arg {key!r} is accepted by neither Model.__init__ "
                            f"({', '.join(model.names) or 'no args'}) nor get_inputs "
                            f"({', '.join(inputs.names) or 'no args'}).")
        if to_model:
            model_kwargs[key] = value
        if to_inputs:
            input_kwargs[key] = value
    return model_kwargs, input_kwargs
