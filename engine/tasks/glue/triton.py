"""The launcher ABI in Triton's form: the kernel.py skeleton `kbench glue TASK --lang triton` prints, and the
binding.py kbench generates for a Triton candidate (engine/tasks/glue/generated.py materialises it).

A Triton candidate is a `kernel.py` that defines the task direction's launcher, `kb_forward` / `kb_backward`, with
the parameters of the CUDA launcher (engine/tasks/glue/abi.py) in the same order, as Python values: each input (a
contiguous CUDA tensor, None for an optional tensor passed as None; `float`, `int`, `bool` as Python scalars), then
each output (a freshly allocated, contiguous, uninitialised tensor to write), then every named dimension (int). No
stream: Triton launches on torch's current stream, the one the timing helper records on. The launcher's @triton.jit
kernels do the work; it returns nothing.

The generated binding.py does what binding.cpp does for CUDA: checks every tensor (CUDA, one device, dtype, rank,
each dimension), makes contiguous copies, allocates the outputs, calls the launcher under the tensors' device and
returns the outputs as the task's direction does. Its text depends on the signature alone, like binding.cpp's.
"""

from __future__ import annotations

import ast

from engine.tasks.glue.abi import GlueParam, LauncherAbi

TRITON_GLUE_VERSION = 1
KERNEL_FILE, BINDING_FILE = "kernel.py", "binding.py"

TORCH_DTYPES = {"f32": "torch.float32", "f64": "torch.float64", "f16": "torch.float16", "bf16": "torch.bfloat16",
                "i64": "torch.int64", "i32": "torch.int32", "i16": "torch.int16", "i8": "torch.int8",
                "u8": "torch.uint8", "bool": "torch.bool"}
TL_DTYPES = {"f32": "tl.float32", "f64": "tl.float64", "f16": "tl.float16", "bf16": "tl.bfloat16", "i64": "tl.int64",
             "i32": "tl.int32", "i16": "tl.int16", "i8": "tl.int8", "u8": "tl.uint8", "bool": "tl.int1"}
_PY_SCALARS = {"float": "float", "int": "int", "bool": "bool"}


def py_params(abi: LauncherAbi) -> list[str]:
    """The launcher's parameter names, in order (the CUDA launcher's, without the stream): a tuple or list of ints
    comes with its count, as for the CUDA launcher."""
    names = []
    for p in (*abi.inputs, *abi.outputs):
        names += [p.cname, p.len_cname] if p.kind == "ints" else [p.cname]
    return names + [c for _, c in abi.dims]


def py_declaration(abi: LauncherAbi) -> str:
    return f"def {abi.launcher}({', '.join(py_params(abi))}):"


def _py_dim(dim: str, values: dict[str, str]) -> str:
    """A dimension as Python over the binding's local names (the signature's // and % are Python's already)."""
    if dim.isdigit():
        return dim
    tree = ast.parse(dim, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = values[node.id]
    return ast.unparse(tree)


def _describe(p: GlueParam) -> str:
    if p.kind == "ints":
        return f"tuple or list of ints, as passed (its count: {p.len_cname})"
    if p.kind != "tensor":
        return f"{p.kind} argument ({_PY_SCALARS[p.kind]})"
    text = f"{p.annotation}: a contiguous CUDA tensor of {TORCH_DTYPES[p.dtype]} (elements {TL_DTYPES[p.dtype]})"
    return text + (", or None" if p.optional else "")


def skeleton_text(abi: LauncherAbi, task_name: str = "") -> str:
    """kernel.py's skeleton: the launcher to define, each parameter explained, and one @triton.jit kernel to fill in."""
    about = f"task {task_name}, {abi.direction}" if task_name else abi.direction
    out = [f'"""kbench Triton launcher ({about}): kernel.py defines {abi.launcher}; kbench generates binding.py.',
           f"    {abi.signature}"]
    out += [f"    ({name}: {annot}, from the forward signature)" for name, annot in abi.resolved]
    out += ["", "Parameters, in order:"]
    out += [f"    {p.cname}: {_describe(p)}" for p in abi.inputs]
    out += [f"    {p.len_cname}: the number of ints in {p.cname} (int)" for p in abi.inputs if p.kind == "ints"]
    out += [f"    {p.cname}: output {p.annotation}, a contiguous uninitialised tensor of {TORCH_DTYPES[p.dtype]}: "
            "write every element" for p in abi.outputs]
    if abi.dims:
        out.append(f"    {', '.join(c for _, c in abi.dims)}: the named dimensions (int); any may be 0")
    out += ["Launch @triton.jit kernels only (they run on torch's current stream); compute nothing with torch here:",
            "the launcher's torch calls are the reference's work, not the candidate's.", '"""',
            "import triton", "import triton.language as tl", "", "",
            "@triton.jit",
            "def _kernel(BLOCK_SIZE: tl.constexpr):",
            "    pid = tl.program_id(0)",
            "    # ...", "", "",
            py_declaration(abi),
            "    BLOCK_SIZE = 1024  # kbench:knob values=256,512,1024,2048",
            "    raise NotImplementedError  # launch _kernel[grid](..., BLOCK_SIZE=BLOCK_SIZE, num_warps=4)"]
    return "\n".join(out) + "\n"


def binding_py_text(abi: LauncherAbi, fake: bool = False, kernel_module: str = "kernel") -> str:
    """binding.py for the ABI: deterministic, one text per signature. `fake`: the same checks and allocations on
    any device (meta and fake tensors too) and no launch: an exported op's fake implementation
    (engine/export/triton_package.py). `kernel_module`: where the launcher is imported from."""
    fn = abi.direction
    values = {p.name: p.cname for p in abi.inputs if p.kind == "int"}
    values.update({d: c for d, c in abi.dims})
    dim_values = {d for d, _ in abi.dims}
    src = set(abi.dim_source)
    first = next(p for p in abi.inputs if p.kind == "tensor" and not p.optional)
    out = [f"# Generated by kbench (triton glue v{TRITON_GLUE_VERSION}) from the task signature; "
           "`kbench glue TASK --lang triton --binding` prints it.",
           f"#   {abi.signature}",
           *[f"#   ({name}: {annot}, from the forward signature)" for name, annot in abi.resolved],
           ("# Checks the arguments and allocates the outputs as binding.py does, on any device, and launches "
            "nothing." if fake else
            f"# Checks the arguments, allocates the outputs and calls {abi.launcher}, which kernel.py defines."),
           "import torch", "", *([] if fake else [f"from {kernel_module} import {abi.launcher}", ""]),
           f'_FN = "{fn}"', "", "",
           "def _check(t, name, annotation, dtype, rank, device):",
           *(["    if not isinstance(t, torch.Tensor):",
              '        raise TypeError(f"{_FN}: {name} must be a tensor ({annotation})")'] if fake else
             ["    if not isinstance(t, torch.Tensor) or not t.is_cuda:",
              '        raise TypeError(f"{_FN}: {name} must be a CUDA tensor ({annotation})")']),
           "    if t.device != device:",
           '        raise ValueError(f"{_FN}: {name} is on {t.device}, the other tensors on {device}")',
           "    if t.dtype != dtype:",
           '        raise TypeError(f"{_FN}: {name} must be {dtype} ({annotation}), got {t.dtype}")',
           "    if t.dim() != rank:",
           '        raise ValueError(f"{_FN}: {name} must have {rank} dimension(s) ({annotation}), got {tuple(t.shape)}")',
           "", "",
           "def _check_size(t, name, annotation, axis, want, what):",
           "    if t.size(axis) != want:",
           '        raise ValueError(f"{_FN}: {name}.size({axis}) is {t.size(axis)} but {annotation} needs {what} = '
           '{want}")',
           "", "",
           "def _size(v, name, annotation, what):",
           "    if v < 0:",
           '        raise ValueError(f"{_FN}: {what} of {name} ({annotation}) would be {v}")',
           "    return v", "", "",
           f"def {fn}({', '.join(p.cname for p in abi.inputs)}):",
           f"    kb_device = {first.cname}.device"]

    def sizes(p: GlueParam, ref: str, indent: str, pos: int) -> list[str]:
        lines = []
        for axis, d in enumerate(p.dims):
            if (d, pos, axis) not in src:
                lines.append(f'{indent}_check_size({ref}, "{p.name}", "{p.annotation}", {axis}, '
                             f'{_py_dim(d, values)}, "{d}")')
        return lines

    def check(p: GlueParam, indent: str) -> str:
        return (f'{indent}_check({p.cname}, "{p.name}", "{p.annotation}", {TORCH_DTYPES[p.dtype]}, {len(p.dims)}, '
                "kb_device)")

    for p in abi.inputs:
        if p.kind == "tensor" and not p.optional:
            out.append(check(p, "    "))
    for d, pos, axis in abi.dim_source:
        out.append(f"    {values[d]} = {abi.inputs[pos].cname}.size({axis})")
    for pos, p in enumerate(abi.inputs):
        if p.kind != "tensor":
            continue
        if p.optional:
            out.append(f"    if {p.cname} is not None:")
            out.append(check(p, "        "))
            out += sizes(p, p.cname, "        ", pos)
            out.append(f"        {p.cname} = {p.cname}.contiguous()")
        else:
            out += sizes(p, p.cname, "    ", pos)
            out.append(f"    {p.cname} = {p.cname}.contiguous()")
    for p in abi.inputs:
        if p.kind == "ints":       # a tuple or a list, as the caller passes it; a tuple of ints for the launcher
            out.append(f"    {p.cname} = tuple(int(v) for v in {p.cname})")
            out.append(f"    {p.len_cname} = len({p.cname})")
    for p in abi.outputs:
        shape = []
        for d in p.dims:
            if d.isdigit() or d in dim_values:
                shape.append(_py_dim(d, values))
            else:
                shape.append(f'_size({_py_dim(d, values)}, "{p.name}", "{p.annotation}", "{d}")')
        size = "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"
        out.append(f"    {p.cname} = torch.empty({size}, dtype={TORCH_DTYPES[p.dtype]}, device=kb_device)")
    if not fake:
        out.append("    with torch.cuda.device(kb_device):")
        out.append(f"        {abi.launcher}({', '.join(py_params(abi))})")
    names = ", ".join(p.cname for p in abi.outputs)
    out.append(f"    return [{names}]" if abi.returns_list else f"    return {abi.outputs[0].cname}")
    return "\n".join(out) + "\n"
