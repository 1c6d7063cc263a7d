"""Import a robust-kbench task folder (docs/formats.md, "robust-kbench import").

The folder holds func_forward.py and/or func_backward.py plus config_forward.json / config_backward.json, as in
SakanaAI/robust-kbench's `tasks/`. Like the native loader, this reads the Python files with `ast` only: loading a
task never runs its code.

Upstream's conventions, kept as they are:
- backward: `class AutogradFunction(torch.autograd.Function)` with the class attribute `backward_fn = None`; its
  `backward` calls `AutogradFunction.backward_fn(...)` with task-specific arguments; the evaluator sets that
  attribute to the candidate's `backward` and runs `Model(...)(*inputs, fn=AutogradFunction.apply)`.
- configs: upstream evaluates either the "single" settings (the default) or the "multi" ones; kbench runs both.
  Each is the product init x input x shared, with the shared keys applied last (they override). The single ones,
  upstream's default run, are also tagged `timed`: kbench times them by default (engine.tasks.model).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import TaskError
from engine.tasks import pysource
from engine.tasks.model import TIMED_TAG, DirectionSpec, Task, TaskConfig, Tolerance

REFERENCE_FILES = {"forward": "func_forward.py", "backward": "func_backward.py"}
CONFIG_FILES = {"forward": "config_forward.json", "backward": "config_backward.json"}
# robust-kbench's evaluation functions default to op_atol = op_rtol = 1e-5 in both directions (its run_kernel.py
# script passes 1e-3); a config file may set its own.
DEFAULT_TOLERANCE = {"forward": 1e-5, "backward": 1e-5}
KINDS = ("init", "input", "shared")
MODES = ("single", "multi")
AUTOGRAD_CLASS = "AutogradFunction"
# What a backward candidate of a robust-kbench task must do (prompts quote it; the runtime implements it).
BACKWARD_CONTRACT = (
    "robust-kbench's convention: the harness sets the class attribute `AutogradFunction.backward_fn` to "
    "`candidate.backward`, runs `Model(...)(*inputs, fn=AutogradFunction.apply)` and backpropagates a fixed "
    "grad_output. `AutogradFunction.backward` (in the reference) calls `AutogradFunction.backward_fn(...)` with its "
    "own arguments, in its own order (the backward signature above shows them, e.g. a tuple of saved tensors), and "
    "uses what it returns as written there, so `backward` takes exactly those arguments and returns exactly what "
    "that call unpacks. The gradients of the inputs that require grad and of every parameter are compared with "
    "plain autograd through forward_fn.")
# robust-kbench passes tolerances on its command line; a json may carry them under either spelling.
TOLERANCE_KEYS = {"atol": ("atol", "op_atol"), "rtol": ("rtol", "op_rtol")}


@dataclass(frozen=True)
class Reference:
    """What the loader learnt from one func_*.py without running it."""

    path: Path
    model: pysource.Params  # Model.__init__
    inputs: pysource.Params  # get_inputs
    signature: str  # the entry point a candidate exports, e.g. "forward(x: torch.Tensor, ...)"


@dataclass(frozen=True)
class ConfigArgs:
    """One combination init x input x shared, already routed to Model and get_inputs."""

    model_kwargs: dict[str, Any]
    input_kwargs: dict[str, Any]
    source: Path  # the json it came from, for error messages
    tags: tuple[str, ...] = ()  # "single" / "multi" and the direction whose file it came from


# --- ast helpers (shared with the KernelBench importer) ------------------------------------------------


def find_function(module: ast.Module | ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node  # type: ignore[return-value]
    return None


def find_class(module: ast.Module, name: str) -> ast.ClassDef | None:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def signature_text(fn: ast.FunctionDef, display: str, skip: tuple[str, ...] = ()) -> str:
    """`display(a: T, b) -> R` from a def, leaving out `skip` params (self, fn=...)."""
    args = fn.args
    parts = []
    for a in args.posonlyargs + args.args + args.kwonlyargs:
        if a.arg in skip:
            continue
        parts.append(f"{a.arg}: {ast.unparse(a.annotation)}" if a.annotation else a.arg)
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    ret = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    return f"{display}({', '.join(parts)}){ret}"


# --- loading --------------------------------------------------------------------------------------------


def is_robust_kbench_task(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in REFERENCE_FILES.values())


def load_robust_kbench(root: Path) -> Task:
    root = Path(root)
    directions = [d for d, f in REFERENCE_FILES.items() if (root / f).is_file()]
    if not directions:
        raise TaskError(f"{root}: not a robust-kbench task folder: it has neither func_forward.py "
                        "nor func_backward.py.")
    refs = {d: read_reference(root / REFERENCE_FILES[d], d) for d in directions}
    specs: dict[str, DirectionSpec] = {}
    combos: list[ConfigArgs] = []
    for d in directions:
        cfg_path = root / CONFIG_FILES[d]
        raw = read_json(cfg_path, beside=REFERENCE_FILES[d])
        specs[d] = DirectionSpec(direction=d, signature=refs[d].signature,
                                 tolerance=read_tolerance(raw, cfg_path, DEFAULT_TOLERANCE[d]),
                                 reference_path=refs[d].path, autograd_backward=d == "backward")
        combos.extend(expand_configs(raw, cfg_path, d))
    # Task.configs serve every direction: the union of both files' settings. A key must be a parameter of some
    # module of the task; a module that lacks it is called without it (see `routing_notes`).
    unique = _dedupe(combos)
    notes: list[str] = []
    for combo in unique:
        check_fits(combo, list(refs.values()))
    notes.extend(routing_notes(unique, refs))
    return Task(name=root.resolve().name, root=root.resolve(), format="robust-kbench",
                description=_description(refs), tags=("robust-kbench",), dtype="float32",
                directions=specs, configs=tuple(name_configs(unique)), notes=tuple(notes))


def read_reference(path: Path, direction: str) -> Reference:
    module = pysource.parse_module(path)
    forward_fn = find_function(module, "forward_fn")
    if forward_fn is None:
        raise TaskError(f"{path}: no top-level function `forward_fn`; a robust-kbench module defines the "
                        "functional forward that Model.forward passes as its default `fn`.")
    model_params = pysource.class_init_params(module, "Model", path)
    model_forward = find_function(find_class(module, "Model"), "forward")  # type: ignore[arg-type]
    if model_forward is None or "fn" not in _arg_names(model_forward):
        raise TaskError(f"{path}: Model.forward must take a parameter `fn` (defaulting to forward_fn); "
                        "the candidate kernel is passed in its place.")
    input_params = pysource.function_params(module, "get_inputs", path)
    if direction == "forward":
        return Reference(path.resolve(), model_params, input_params, signature_text(forward_fn, "forward"))
    call, target = backward_fn_call(module, path)
    return Reference(path.resolve(), model_params, input_params, backward_signature(call, target))


def backward_fn_call(module: ast.Module, path: Path) -> tuple[ast.Call, ast.expr | None]:
    """The `AutogradFunction.backward_fn(...)` call inside AutogradFunction.backward, and what it is assigned to.

    Upstream's convention: the class attribute `backward_fn = None` is set to the candidate's `backward` by the
    evaluator, so `backward` must reach it through the class (`AutogradFunction.backward_fn`)."""
    cls = find_class(module, AUTOGRAD_CLASS)
    backward = find_function(cls, "backward") if cls else None
    if cls is None or backward is None:
        raise TaskError(f"{path}: no class `{AUTOGRAD_CLASS}` with a `backward` method; a robust-kbench backward "
                        f"task defines `class {AUTOGRAD_CLASS}(torch.autograd.Function)` with the class attribute "
                        "`backward_fn = None` and a backward that calls `AutogradFunction.backward_fn(...)`.")
    if not _has_class_attribute(cls, "backward_fn"):
        legacy = " (a module-level `def backward_fn` is not robust-kbench's convention)" \
            if find_function(module, "backward_fn") else ""
        raise TaskError(f"{path}: class `{AUTOGRAD_CLASS}` has no class attribute `backward_fn`{legacy}; "
                        "robust-kbench's convention is `backward_fn = None` in the class body, set to the candidate's "
                        "backward at run time.")
    for node in ast.walk(backward):
        if isinstance(node, ast.Call) and _is_backward_fn(node.func):
            target = None
            for stmt in ast.walk(backward):
                if isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1:
                    target = stmt.targets[0]
            return node, target
    raise TaskError(f"{path}: {AUTOGRAD_CLASS}.backward never calls `{AUTOGRAD_CLASS}.backward_fn(...)`; the "
                    "candidate kernel is set as that class attribute, so backward must call it.")


def _is_backward_fn(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "backward_fn"
            and isinstance(func.value, ast.Name) and func.value.id in (AUTOGRAD_CLASS, "cls"))


def _has_class_attribute(cls: ast.ClassDef, name: str) -> bool:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
    return False


def backward_signature(call: ast.Call, target: ast.expr | None) -> str:
    """`backward(grad_output, x, weights) -> (grad_input, grad_weights, grad_biases)`: the arguments
    AutogradFunction.backward passes, as written there, and the names it gives the result."""
    args = [ast.unparse(a) for a in call.args] + [ast.unparse(k) for k in call.keywords]
    text = f"backward({', '.join(args)})"
    if target is not None:
        if isinstance(target, (ast.Tuple, ast.List)):
            text += f" -> ({', '.join(ast.unparse(e) for e in target.elts)})"
        else:
            text += f" -> {ast.unparse(target)}"
    return text


def _arg_names(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]


def read_json(path: Path, beside: str) -> dict[str, Any]:
    if not path.is_file():
        raise TaskError(f"{path}: missing. A robust-kbench task needs {path.name} beside {beside}, with the "
                        "lists {single,multi}_{input,init,shared}_configs.")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}).") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read the file ({exc}).") from None
    if not isinstance(raw, dict):
        raise TaskError(f"{path}: the top level must be a JSON object holding the config lists, "
                        f"not {type(raw).__name__}.")
    return raw


def read_tolerance(raw: dict[str, Any], path: Path, default: float) -> Tolerance:
    nested = raw.get("tolerance") if isinstance(raw.get("tolerance"), dict) else {}
    values = {}
    for which, keys in TOLERANCE_KEYS.items():
        found = [(k, src[k]) for src in (raw, nested) for k in keys if k in src]
        if not found:
            values[which] = default
            continue
        key, value = found[0]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise TaskError(f"{path}: `{key}` must be a non-negative number, got {value!r}.")
        values[which] = float(value)
    return Tolerance(values["atol"], values["rtol"])


def _read_list(raw: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise TaskError(f"{path}: `{key}` must be a list of JSON objects, got {type(value).__name__}.")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise TaskError(f"{path}: `{key}` item #{i + 1} must be a JSON object, got {item!r}.")
    return [dict(v) for v in value]


def pick_list(raw: dict[str, Any], kind: str, mode: str, path: Path) -> list[dict[str, Any]]:
    """The `<mode>_<kind>_configs` list (the other mode's when this one is absent); `[]` means no settings."""
    other = "multi" if mode == "single" else "single"
    own, fallback = f"{mode}_{kind}_configs", f"{other}_{kind}_configs"
    if own not in raw and fallback not in raw:
        raise TaskError(f"{path}: missing required key `single_{kind}_configs` (or `multi_{kind}_configs`): a list "
                        f"of JSON objects with the {kind} settings (use [{{}}] when there are none).")
    for key in (own, fallback):
        value = _read_list(raw, key, path)
        if value is not None:
            return value or [{}]
    return [{}]


# Upstream's four settings modes (robust_kbench/config_task.py; run_kernel.py's --multi_input_settings and
# --multi_init_settings): which list of each kind a mode reads. The shared list is the multi one only when both flags
# are set.
SETTINGS_MODES = {"single": {"input": "single", "init": "single", "shared": "single"},
                  "multi-input": {"input": "multi", "init": "single", "shared": "single"},
                  "multi-init": {"input": "single", "init": "multi", "shared": "single"},
                  "multi": {"input": "multi", "init": "multi", "shared": "multi"}}


def expand_configs(raw: dict[str, Any], path: Path, direction: str) -> list[ConfigArgs]:
    """Upstream's settings modes: single (its default), multi-input only, multi-init only and multi, each
    init x input x shared (tagged with the mode). The shared keys go to both Model and get_inputs and are applied
    last, so they override an init or input key of the same name."""
    for kind in KINDS:
        for mode in MODES:
            _read_list(raw, f"{mode}_{kind}_configs", path)  # type errors name the key, whichever mode is used
    modes = ["single"] + (list(SETTINGS_MODES)[1:] if any(f"multi_{k}_configs" in raw for k in KINDS) else [])
    out = []
    for mode in modes:
        lists = {kind: pick_list(raw, kind, SETTINGS_MODES[mode][kind], path) for kind in KINDS}
        for init in lists["init"]:
            for inp in lists["input"]:
                for shared in lists["shared"]:
                    out.append(ConfigArgs({**init, **shared}, {**inp, **shared}, path, (mode, direction)))
    return out


def check_fits(combo: ConfigArgs, refs: list[Reference]) -> None:
    """Every key must be a parameter of Model.__init__ / get_inputs of at least one module of the task."""
    for kwargs, attr, what in ((combo.model_kwargs, "model", "Model.__init__"),
                               (combo.input_kwargs, "inputs", "get_inputs")):
        if any(getattr(r, attr).has_var_kwargs for r in refs):
            continue
        unknown = [k for k in kwargs if not any(k in getattr(r, attr).names for r in refs)]
        if unknown:
            takes = "; ".join(f"{r.path.name}: {', '.join(getattr(r, attr).names) or 'no args'}" for r in refs)
            raise TaskError(f"{combo.source}: setting(s) {', '.join(map(repr, unknown))} are not accepted by "
                            f"{what} in {' or '.join(r.path.name for r in refs)} (it takes: {takes}).")


def routing_notes(combos: list[ConfigArgs], refs: dict[str, Reference]) -> list[str]:
    """Keys a module does not take: upstream would raise TypeError there; kbench leaves them out for that module."""
    notes = []
    for d, ref in refs.items():
        for kwargs_of, attr, what in ((lambda c: c.model_kwargs, "model", "Model.__init__"),
                                      (lambda c: c.input_kwargs, "inputs", "get_inputs")):
            params = getattr(ref, attr)
            if params.has_var_kwargs:
                continue
            missing: dict[str, set[str]] = {}
            for c in combos:
                for k in kwargs_of(c):
                    if k not in params.names:
                        missing.setdefault(k, set()).add(c.source.name)
            for key, sources in sorted(missing.items()):
                notes.append(f"setting {key!r} ({', '.join(sorted(sources))}) is not a parameter of {what} in "
                             f"{ref.path.name}; kbench calls it without {key!r} there (robust-kbench itself would "
                             f"raise TypeError on this {d} run).")
    return notes


def _dedupe(combos: list[ConfigArgs]) -> list[ConfigArgs]:
    """One config per distinct (model_kwargs, input_kwargs); its tags merge those of every duplicate."""
    index: dict[str, int] = {}
    out: list[ConfigArgs] = []
    for c in combos:
        key = json.dumps([c.model_kwargs, c.input_kwargs], sort_keys=True, default=str)
        if key in index:
            first = out[index[key]]
            tags = first.tags + tuple(t for t in c.tags if t not in first.tags)
            out[index[key]] = ConfigArgs(first.model_kwargs, first.input_kwargs, first.source, tags)
        else:
            index[key] = len(out)
            out.append(c)
    return out


def name_configs(combos: list[ConfigArgs]) -> list[TaskConfig]:
    """Name each config by the settings that vary across configs (`batch_size=7,out_features=65`)."""
    merged = [{**c.model_kwargs, **c.input_kwargs} for c in combos]
    keys: list[str] = []
    for args in merged:
        keys.extend(k for k in args if k not in keys)
    varying = [k for k in keys if len({_show(a.get(k)) for a in merged}) > 1 or any(k not in a for a in merged)]
    configs, used = [], set()
    for i, (combo, args) in enumerate(zip(combos, merged)):
        base = ",".join(f"{k}={_show(args[k])}" for k in varying if k in args) or "default"
        name, n = base, 2
        while name in used:
            name, n = f"{base}#{n}", n + 1
        used.add(name)
        tags = ("robust-kbench",) + tuple(sorted(combo.tags, key=lambda t: (t not in MODES, t)))
        if "single" in combo.tags:      # upstream's default run: what kbench times by default
            tags += (TIMED_TAG,)
        configs.append(TaskConfig(name=name, model_kwargs=combo.model_kwargs, input_kwargs=combo.input_kwargs,
                                  seed=i, init="normal", cost={}, tags=tags))
    return configs


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


def _description(refs: dict[str, Reference]) -> str:
    for ref in refs.values():
        module = pysource.parse_module(ref.path)
        doc = ast.get_docstring(module)
        model = find_class(module, "Model")
        fn = find_function(module, "forward_fn")
        for text in (doc, fn and ast.get_docstring(fn), model and ast.get_docstring(model)):
            if text and text.strip():
                return text.strip().splitlines()[0]
    return ""
