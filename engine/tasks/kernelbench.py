"""Import a KernelBench problem: one .py with Model, get_inputs() and get_init_inputs().

As ScalingIntelligence/KernelBench evaluates it: the configs are different seeds of the problem's own
`get_inputs()` (never rewritten, so a problem's preconditions hold: symmetric or triangular matrices, +-1
targets, positive inputs to a log), the tolerance follows the precision (fp32 1e-4, fp16 and bf16 1e-2), and the
model stays in training mode. kbench adds one config with smaller odd sizes where the file's structure allows it
(tagged `kbench-addition`). Read with `ast` only, like the other loaders.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from engine.errors import TaskError
from engine.tasks import pysource
from engine.tasks.model import DirectionSpec, Task, TaskConfig, Tolerance
from engine.tasks.robust_kbench import find_class, find_function, signature_text

# KernelBench's eval (get_tolerance_for_precision): atol = rtol, by precision, after torchbench.
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
SEEDS = (0, 1, 2)
ADDITION_TAG = "kbench-addition"
VARIANT_MIN = 8  # smaller integers are more often structure (a dim, a kernel size) than a size
# Packages a problem may import that are not the torch stack; pip names where they differ from the module's.
PIP_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python", "yaml": "pyyaml"}
TORCH_STACK = {"torch", "torchvision", "torchaudio", "numpy", "triton"}


def split_ref(ref: str) -> tuple[str, str]:
    """`problem.py@bf16` -> (`problem.py`, "bfloat16"); no suffix means fp32."""
    path, sep, precision = str(ref).rpartition("@")
    if sep and path.endswith(".py") and precision in PRECISIONS:
        return path, PRECISIONS[precision]
    return str(ref), "float32"


def load_kernelbench(path: Path, dtype: str = "float32") -> Task:
    path = Path(path)
    if dtype not in TOLERANCES:
        raise TaskError(f"{path}: precision {dtype!r} is not one KernelBench evaluates (fp32, fp16, bf16).")
    if not path.is_file():
        raise TaskError(f"{path}: not found; a KernelBench problem is one .py file.")
    module = pysource.parse_module(path)
    model = find_class(module, "Model")
    if model is None:
        raise TaskError(f"{path}: no top-level class `Model`; a KernelBench problem defines Model(nn.Module), "
                        "get_inputs() and get_init_inputs().")
    forward = find_function(model, "forward")
    if forward is None:
        raise TaskError(f"{path}: class Model has no `forward` method.")
    for fn_name in ("get_inputs", "get_init_inputs"):
        _check_no_required_args(module, fn_name, path)
    notes = list(_requirements(module, path))
    configs = [TaskConfig(name=f"seed{seed}", model_kwargs={}, input_kwargs={}, seed=seed, init="normal",
                          tags=("kernelbench",)) for seed in SEEDS]
    variant = size_variant(module)
    if variant:
        shown = ",".join(f"{k}={v}" for k, v in variant.items())
        configs.append(TaskConfig(name="odd-sizes", model_kwargs={}, input_kwargs=variant, seed=len(SEEDS),
                                  init="normal", tags=(ADDITION_TAG,)))
        notes.append(f"config odd-sizes is kbench's addition ({shown}): module constants that only get_inputs "
                     "reads, made odd and smaller, to catch kernels specialised to the problem's one shape.")
    tol = TOLERANCES[dtype]
    spec = DirectionSpec(direction="forward", signature=signature_text(forward, "forward", skip=("self",)),
                         tolerance=Tolerance(tol, tol), reference_path=path.resolve())
    precision = next(k for k, v in PRECISIONS.items() if v == dtype)
    name = path.stem if dtype == "float32" else f"{path.stem}-{precision}"
    # root is the problem file itself: a KernelBench folder holds many unrelated problems.
    return Task(name=name, root=path.resolve(), format="kernelbench", description=_description(module, model),
                tags=("kernelbench",), dtype=dtype, directions={"forward": spec}, configs=tuple(configs),
                notes=tuple(notes))


def _check_no_required_args(module: ast.Module, name: str, path: Path) -> None:
    fn = find_function(module, name)
    if fn is None:
        raise TaskError(f"{path}: no top-level function `{name}()`; a KernelBench problem defines Model, "
                        "get_inputs() and get_init_inputs().")
    a = fn.args
    positional = a.posonlyargs + a.args
    required = len(positional) - len(a.defaults)
    required += sum(1 for d in a.kw_defaults if d is None)
    if required > 0:
        raise TaskError(f"{path}: `{name}` must be callable with no arguments (KernelBench calls {name}()), "
                        f"but it requires {required}.")


def _requirements(module: ast.Module, path: Path) -> list[str]:
    """Notes on what the problem needs beyond torch (level 4 problems load Hugging Face models). A package that is
    not installed is an error naming it: the problem could not even be imported."""
    wanted: list[str] = []
    for node in ast.walk(module):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for n in names:
            top = n.split(".")[0]
            if top not in sys.stdlib_module_names and top not in TORCH_STACK and top not in wanted:
                wanted.append(top)
    missing = [n for n in wanted if importlib.util.find_spec(n) is None]
    if missing:
        pip = " ".join(PIP_NAMES.get(n, n) for n in missing)
        raise TaskError(f"{path}: the problem imports {', '.join(missing)}, which is not installed here; "
                        f"`pip install {pip}` first{_who_needs(missing)}.")
    notes = []
    if wanted:
        notes.append(f"needs the packages {', '.join(wanted)} (installed).")
    if "from_pretrained" in ast.unparse(module):
        notes.append("loads a pretrained model with from_pretrained: its weights must already be in the local "
                     "Hugging Face cache (the evaluation sandbox has no network).")
    return notes


# Which extra of kbench installs a package KernelBench's problems import, and which problems need it.
EXTRAS = {"einops": "pip install 'kbench[kernelbench]' installs it: KernelBench's level 3 Mamba2 problems need it",
          "transformers": "KernelBench's level 4 problems need it, and their models' weights in the Hugging Face "
                          "cache"}


def _who_needs(missing: list[str]) -> str:
    said = [EXTRAS[n] for n in missing if n in EXTRAS]
    return f" ({'; '.join(said)})" if said else ""


def size_variant(module: ast.Module) -> dict[str, int]:
    """Smaller odd values for the module-level integer constants that only `get_inputs` reads, when `Model` holds
    no size of its own (an integer literal >= 8, e.g. a `view(-1, 400)` that fixes the input's spatial size).

    Such a constant shapes the inputs and nothing else, so changing it keeps the problem's structure (its
    get_inputs still builds symmetric matrices, +-1 targets...). Empty when nothing qualifies."""
    model = find_class(module, "Model")
    get_inputs = find_function(module, "get_inputs")
    if model is None or get_inputs is None or _has_size_literal(model):
        return {}
    constants: dict[str, int] = {}
    assigned: dict[str, int] = {}
    for node in module.body:
        for target in _assigned_names(node):
            assigned[target] = assigned.get(target, 0) + 1
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            constants[node.targets[0].id] = node.value.value
    read_by_inputs = _loaded_names(get_inputs)
    read_elsewhere: set[str] = set()
    literals: dict[str, set[int]] = {}  # int literals outside each constant's own assignment
    for node in module.body:
        own = (node.targets[0].id if isinstance(node, ast.Assign) and len(node.targets) == 1
               and isinstance(node.targets[0], ast.Name) and node.targets[0].id in constants else None)
        values = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is int}
        for name in constants:
            if name != own:
                literals.setdefault(name, set()).update(values)
        if node is get_inputs or own is not None:
            continue
        read_elsewhere |= _loaded_names(node)
    variant = {}
    for name, value in constants.items():
        # the same number written elsewhere (`input_shape = (32768,)` beside `batch_size = 32768`) may be a
        # size that must match this one: leave both alone
        if (name in read_by_inputs and name not in read_elsewhere and assigned.get(name) == 1
                and value >= VARIANT_MIN and value not in literals.get(name, set())):
            variant[name] = value - 1 if value % 2 == 0 else value - 2
    return variant


def _has_size_literal(cls: ast.ClassDef) -> bool:
    return any(isinstance(n, ast.Constant) and type(n.value) is int and n.value >= VARIANT_MIN
               for n in ast.walk(cls))


def _assigned_names(node: ast.stmt) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            out.append(sub.id)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.append(node.name)
    return out


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _description(module: ast.Module, model: ast.ClassDef) -> str:
    doc = ast.get_docstring(model) or ast.get_docstring(module) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
