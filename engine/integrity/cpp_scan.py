"""Static rules for C++/CUDA candidate sources, read as a syntax tree (tree-sitter's CUDA grammar).

The tree tells a parameter from a variable, a declaration at namespace scope from one in a function, a call
from a comment or a string, and host code from device code, so each rule looks only where its construct can
mean what the rule says:

- library and ATen use: calls (never includes); tensor methods and operators only on expressions whose type
  is known to be a tensor (parameters, declarations, `auto` from a tensor-valued expression), in host code;
- persistent state: `static` locals, namespace-scope and static member variables; a tensor kept there fails
  only when it flows to a `return` (an output cache), else a person looks;
- streams and threads: a created or pooled stream fails only when work is launched on it without joining it
  back to the caller's stream; a host thread only when it is detached or never joined;
- precision: conversions, local variables, casts and PTX in the task-dtype's lower precisions; a half type in
  a parameter, a return type, a specialisation or an unused include is not a use;
- shape specialisation: size comparisons with a config size (a hint).

A construct inside a region the parser could not read (a syntax error, a macro it cannot expand) is never
`fail`: the rule says `suspicious` there instead. Macro bodies are parsed as statement fragments so calls
hidden in `#define`s are still seen.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable

from engine.integrity.findings import (
    ATEN_FALLBACK,
    FAIL,
    HOST_THREAD,
    INFO,
    LOWER_PRECISION,
    SHAPE_SPECIALISATION,
    SIDE_STREAM,
    STATIC_CACHE,
    SUSPICIOUS,
    TORCH_COMPUTE,
    TRY_CATCH,
    VENDOR_LIBRARY,
    Finding,
    fallback_status,
    library_use_status,
)

# -- vocabulary ------------------------------------------------------------------------------------------------

# torch::/at:: functions a binding may call: allocation, views, metadata, checks, streams and guards.
ALLOC_FUNCS = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
               "full_like", "from_blob", "tensor", "arange", "scalar_tensor"}
ALLOWED_TORCH_FUNCS = ALLOC_FUNCS | {
    "device", "dtype", "kCUDA", "TensorOptions", "getCurrentCUDAStream", "getDefaultCUDAStream",
    "getCurrentDeviceProperties", "getDeviceProperties", "current_device", "device_count", "set_device",
    "check_dim_size", "checkDim", "checkSize", "checkAllSameGPU", "checkContiguous", "isIntegralType",
    "isFloatingType", "typeMetaToScalarType", "toString", "elementSize", "maybe_wrap_dim", "requires_grad",
    "is_available", "cuda", "NoGradGuard", "AutoDispatchBelowADInplaceOrView", "layout", "memory_format",
    "globalContext", "get_device", "OptionalCUDAGuard", "CUDAGuard", "DeviceGuard", "IntArrayRef",
    "nullopt", "optional", "make_optional", "MemoryFormat", "ScalarType", "Scalar", "Device",
    "getCurrentCUDASparseHandle",
}
NON_TENSOR_FUNCS = ALLOWED_TORCH_FUNCS - ALLOC_FUNCS
# Namespaces under torch::/at:: that hold compute or library kernels, whatever the function's name.
COMPUTE_NAMESPACES = ("nn::functional::", "native::", "linalg::", "fft::", "special::", "cuda::blas::",
                      "_ops::", "nn::", "cpu::", "cuda::sparse::")
# Tensor methods that run ATen compute kernels.
COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "addmm_", "baddbmm", "mv", "dot", "einsum", "linear", "conv1d", "conv2d",
    "conv3d", "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "sum", "mean",
    "var", "std", "var_mean", "prod", "norm", "exp", "exp_", "log", "sqrt", "rsqrt", "relu", "relu_", "gelu",
    "silu", "sigmoid", "tanh", "max_pool2d", "avg_pool2d", "add", "add_", "sub", "sub_", "mul", "mul_",
    "div", "div_", "pow", "addcmul", "addcdiv", "cumsum", "amax", "amin", "logsumexp", "cross_entropy",
    "nll_loss", "scaled_dot_product_attention", "clamp", "clamp_", "where", "masked_fill", "index_select",
    "gather", "scatter_add", "neg", "reciprocal", "abs", "erf", "square", "max", "min", "argmax", "topk",
    "sort", "lerp", "outer", "unfold", "im2col", "pad", "dropout", "sigmoid_", "tanh_", "rsqrt_", "sqrt_",
    "exp2", "log2", "expm1", "log1p", "cos", "sin", "triu", "tril", "cumprod", "argmin", "mse_loss",
}
TORCH_COMPUTE_FUNCS = COMPUTE_METHODS | {"cat", "stack", "chain_matmul", "convolution", "_softmax",
                                         "_log_softmax", "native_layer_norm", "cudnn_convolution", "conv_transpose2d",
                                         "embedding", "bilinear", "multi_head_attention_forward"}
# Tensor methods that return something other than a tensor (sizes, pointers, flags, scalars).
NON_TENSOR_METHODS = {
    "size", "sizes", "sym_size", "sym_sizes", "stride", "strides", "numel", "sym_numel", "dim", "ndimension",
    "data_ptr", "const_data_ptr", "mutable_data_ptr", "item", "scalar_type", "dtype", "options", "device",
    "get_device", "is_cuda", "is_cpu", "is_contiguous", "defined", "element_size", "itemsize", "nbytes",
    "storage_offset", "is_floating_point", "layout", "requires_grad", "accessor", "packed_accessor32",
    "packed_accessor64", "generic_packed_accessor", "toString", "name", "use_count", "equal", "allclose",
    "is_same", "is_complex", "is_non_overlapping_and_dense", "suggest_memory_format", "has_storage",
    "storage", "is_sparse", "type", "numel_bytes", "size_bytes",
}
TENSOR_TYPE = re.compile(r"^(?:const\s+|volatile\s+)*(?:(?:torch|at)\s*::\s*)?Tensor\b")
TENSOR_CONTAINER = re.compile(r"\b(?:vector|array|optional|tuple|pair|map|unordered_map|deque|list|"
                              r"TensorList|ITensorListRef)\b[^;]*\bTensor\b|\bTensorList\b")

VENDOR_PREFIX = (("cublasLt", "cuBLASLt"), ("cublas", "cuBLAS"), ("cudnn", "cuDNN"), ("cufft", "cuFFT"),
                 ("cusparseLt", "cuSPARSELt"), ("cusparse", "cuSPARSE"), ("cusolver", "cuSOLVER"),
                 ("curandGenerate", "cuRAND"), ("curandCreateGenerator", "cuRAND"), ("nvjpeg", "nvJPEG"))
VENDOR_HANDLES = {"getCurrentCUDABlasHandle": "cuBLAS", "getCurrentCUDABlasLtHandle": "cuBLASLt",
                  "getCudnnHandle": "cuDNN", "getCurrentCUDASolverDnHandle": "cuSOLVER"}
THRUST_UTILITIES = {"device_pointer_cast", "raw_pointer_cast", "device_ptr", "make_tuple", "get", "pair",
                    "make_pair", "complex", "tuple", "plus", "maximum", "minimum", "identity", "multiplies"}
# CUTLASS's device-level operators run whole library kernels; its numeric types, arrays and CuTe are the
# building blocks of a kernel the candidate writes itself (not library compute).
CUTLASS_LIBRARY = re.compile(r"^cutlass::(?:gemm|conv|reduction)::device::|^cutlass::library::")

HALF_TYPES = {"half", "half2", "__half", "__half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
              "nv_bfloat162", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__nv_fp8x2_e4m3", "__nv_fp8x2_e5m2",
              "__nv_fp8x4_e4m3", "__nv_fp8x4_e5m2", "__nv_fp8_storage_t", "__half_raw", "__nv_bfloat16_raw"}
HALF_TEXT = re.compile(r"(?<![\w:])(?:" + "|".join(sorted(HALF_TYPES, key=len, reverse=True)) + r")\b|"
                       r"\b(?:at|c10)::(?:Half|BFloat16|Float8_\w+)\b")
HALF_QUALIFIED = re.compile(r"^(?:at|c10|torch)::(?:Half|BFloat16|Float8_\w+)$")
HALF_SCALARS = re.compile(r"^(?:(?:at|c10|torch)::)?(?:ScalarType::)?(?:kHalf|kFloat16|kBFloat16|Half|BFloat16|"
                          r"kFloat8_\w+|Float8_\w+)$")
HALF_CALLS = re.compile(r"^(?:__float2half\w*|__floats2half2_rn|__float22half2_rn|__half2float|__half22float2|"
                        r"__float2bfloat16\w*|__floats2bfloat162_rn|__float22bfloat162_rn|__bfloat162float|"
                        r"__bfloat1622float2|__low2float|__high2float|__h(?:add|sub|mul|div|fma|neg|max|min)2?\w*|"
                        r"h2?(?:exp|log|sqrt|rsqrt|rcp|sin|cos)2?|__nv_cvt_\w*fp8\w*)$")
PTX_LOW = re.compile(r"\.(?:f16|bf16|f16x2|bf16x2|e4m3|e5m2|e4m3x2|e5m2x2)\b")
PTX_TF32 = re.compile(r"\.tf32\b")
TF32_CALLS = {"__float_to_tf32", "wmma::__float_to_tf32", "nvcuda::wmma::__float_to_tf32"}
TF32_SPLIT_CALLS = re.compile(r"(?:^|::)(?:__uint_as_float|__int_as_float|__float_to_tf32|float)$")
FAST_MATH_ENUMS = re.compile(r"^(?:CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|"
                             r"CUDNN_DATA_HALF|CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)$")
TF32_SWITCHES = {"setAllowTF32CuBLAS", "setAllowTF32CuDNN", "setFloat32MatmulPrecision",
                 "setAllowFP16ReductionCuBLAS", "setAllowBF16ReductionCuBLAS"}
LOW_DTYPE_CALLS = {"to", "toType", "dtype", "type", "empty", "empty_like", "zeros", "zeros_like", "ones",
                   "ones_like", "full", "full_like", "_to_copy", "TensorOptions", "options", "from_blob",
                   "scalar_tensor", "tensor", "arange", "empty_strided"}

STREAM_SOURCES = {"getStreamFromPool", "getStreamFromExternal"}
STREAM_CREATE = re.compile(r"^cudaStreamCreate\w*$")
STREAM_SETTERS = {"setCurrentCUDAStream", "CUDAStreamGuard", "OptionalCUDAStreamGuard", "CUDAMultiStreamGuard"}
STREAM_NON_WORK = re.compile(r"^(?:cudaStreamCreate\w*|cudaStreamDestroy|cudaStreamSynchronize|cudaStreamQuery|"
                             r"cudaStreamGetPriority|cudaStreamGetFlags|cudaStreamWaitEvent|cudaEventRecord\w*|"
                             r"cudaEventSynchronize|cudaEventQuery)$")
THREAD_TYPES = re.compile(r"^std::(?:thread|jthread)$")
THREAD_CALLS = {"std::async": "std::async", "pthread_create": "pthread_create",
                "std::thread": "std::thread", "std::jthread": "std::jthread"}
HOST_CALLBACKS = {"cudaLaunchHostFunc", "cudaStreamAddCallback"}
LAUNCH_CALLS = re.compile(r"^(?:cudaLaunchKernel\w*|cudaLaunchCooperativeKernel\w*|cuLaunchKernel\w*|"
                          r"cudaGraphLaunch)$")
RETHROW_CALLS = re.compile(r"^(?:TORCH_CHECK\w*|AT_ERROR|TORCH_INTERNAL_ASSERT\w*|std::rethrow_exception|abort|"
                           r"std::abort|exit|std::exit|C10_THROW_ERROR|TORCH_WARN\w*)$")

CALL_COUNTER = re.compile(r"call|count|invoc|iter|times|n_?run|step|hits|seen", re.IGNORECASE)
INTEGRAL = re.compile(r"\b(?:int|long|unsigned|size_t|int64_t|uint64_t|int32_t|uint32_t|short)\b")
SIZE_NAMES = {"n", "N", "m", "M", "k", "K", "rows", "cols", "batch", "hidden", "dim", "D", "H", "W", "C", "B",
              "L", "T", "S", "inner", "outer", "features", "in_features", "out_features", "numel", "size", "len",
              "length", "width", "height", "seq", "seq_len", "num_rows", "num_cols", "n_rows", "n_cols",
              "batch_size", "hidden_size", "channels", "in_channels", "out_channels"}
SIZE_METHODS = {"size", "numel", "stride", "sizes", "strides", "sym_size"}
SHAPE_NAME = re.compile(r"^(N|M|K|ROWS|COLS|HIDDEN|BATCH|DIM|SEQ\w*|FEATURES|IN_FEATURES|OUT_FEATURES|"
                        r"NUM_ROWS|NUM_COLS|N_COLS|N_ROWS|HIDDEN_\w*|ROW_LEN\w*|COL\w*|\w*_SIZE_N|"
                        r"WIDTH|HEIGHT|CHANNELS)$", re.IGNORECASE)
PERSISTENT_SKIP = re.compile(r"\b(?:__constant__|__device__|__shared__|__managed__|extern|constexpr|"
                             r"thread_local|std::once_flag|once_flag|std::mutex|mutex)\b")
KEY_METHODS = {"find", "count", "at", "emplace", "insert", "contains", "try_emplace", "operator[]"}

_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_WS = re.compile(r"\s+")

_QUERY = """
(function_definition) @func
(declaration) @decl
(field_declaration) @field
(call_expression) @call
(binary_expression) @bin
(unary_expression) @unary
(assignment_expression) @assign
(try_statement) @try
(gnu_asm_expression) @asm
(preproc_def) @def
(preproc_function_def) @fdef
(preproc_call) @pcall
(using_declaration) @using
(namespace_alias_definition) @alias
((type_identifier) @type (#match? @type "^(__)?(half2?|nv_bfloat162?|half_raw|nv_bfloat16_raw|nv_fp8[A-Za-z0-9_]*)$"))
(qualified_identifier) @qual
(kernel_call_syntax) @launch
(return_statement) @ret
(if_statement) @if
((identifier) @ident (#match? @ident "^(cudaStreamPerThread|kHalf|kBFloat16|kFloat16|CUBLAS_[A-Z0-9_]+|CUDNN_[A-Z0-9_]+)$"))
"""


@lru_cache(maxsize=1)
def _language() -> Any:
    import tree_sitter
    import tree_sitter_cuda
    return tree_sitter.Language(tree_sitter_cuda.language())


@lru_cache(maxsize=1)
def _query() -> Any:
    import tree_sitter
    return tree_sitter.Query(_language(), _QUERY)


def parser_available() -> str | None:
    """None when the C++/CUDA parser loads, else why not (the static stage is then `skipped`)."""
    try:
        _language()
        _query()
    except Exception as exc:  # noqa: BLE001 - ImportError, or a grammar the binding cannot load
        return f"{type(exc).__name__}: {exc}"
    return None


def _parse(src: bytes) -> Any:
    import tree_sitter
    return tree_sitter.Parser(_language()).parse(src)


def _captures(node: Any) -> dict[str, list[Any]]:
    import tree_sitter
    return tree_sitter.QueryCursor(_query()).captures(node)


# -- small tree helpers ----------------------------------------------------------------------------------------

def _text(node: Any) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def _name(node: Any) -> str:
    """A callee or type name without template arguments or spaces: `at::cuda::getCurrentCUDAStream`."""
    t = _WS.sub("", _text(node))
    while True:
        s = _TEMPLATE_ARGS.sub("", t)
        if s == t:
            return s
        t = s


def _callee(call: Any) -> Any:
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "template_function":
        fn = fn.child_by_field_name("name") or fn
    return fn


def _method(call: Any) -> tuple[Any, str] | None:
    """(receiver, method name) of a call `recv.method(...)` / `recv->method(...)`."""
    fn = call.child_by_field_name("function")
    if fn is None or fn.type != "field_expression":
        return None
    f = fn.child_by_field_name("field")
    name = _text(f.child_by_field_name("name") or f.named_children[0]) if f is not None and \
        f.type == "template_method" and f.named_children else _text(f)
    return fn.child_by_field_name("argument"), name


def _declared_name(node: Any) -> Any:
    """The identifier a declarator declares (through init/reference/pointer/array declarators)."""
    while node is not None and node.type not in ("identifier", "field_identifier"):
        if node.type in ("function_declarator", "structured_binding_declarator"):
            return None
        nxt = node.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in node.named_children if c.type in (
                "identifier", "field_identifier", "init_declarator", "reference_declarator", "pointer_declarator",
                "array_declarator", "parenthesized_declarator")), None)
        node = nxt
    return node


def _declarators(decl: Any) -> list[Any]:
    return [c for i, c in enumerate(decl.children) if decl.field_name_for_child(i) == "declarator"]


def _value(declarator: Any) -> Any:
    return declarator.child_by_field_name("value") if declarator.type == "init_declarator" else None


def _idents(node: Any) -> Iterable[Any]:
    """Identifiers inside `node` (a small subtree: an expression or a statement)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            yield n
        elif n.type in ("string_literal", "raw_string_literal", "char_literal", "comment"):
            continue
        else:
            stack.extend(n.children)


def _mentions(node: Any, names: set[str]) -> str | None:
    if not names:
        return None
    for i in _idents(node):
        t = _text(i)
        if t in names:
            return t
    return None


def _flows(node: Any, names: set[str]) -> str | None:
    """A name of `names` whose value `node` carries: a mention that is not only the receiver of a size, pointer
    or flag query (`ws.data_ptr<float>()`, `cache.size(0)` read the tensor, they do not pass it on)."""
    for i in _idents(node):
        t = _text(i)
        if t not in names:
            continue
        fe = i.parent
        if fe is not None and fe.type == "field_expression" and fe.child_by_field_name("argument") is not None and \
                fe.child_by_field_name("argument").id == i.id and fe.parent is not None and \
                fe.parent.type == "call_expression":
            m = _method(fe.parent)
            if m is not None and m[1] in NON_TENSOR_METHODS:
                continue
        return t
    return None


def _base_name(node: Any) -> str:
    """The variable an lvalue expression names: `&streams[i]` -> streams, `&s` -> s, `ctx->s` -> ctx."""
    while node is not None and node.type in ("pointer_expression", "subscript_expression", "field_expression",
                                             "parenthesized_expression"):
        node = node.child_by_field_name("argument") or (node.named_children[0] if node.named_children else None)
    return _text(node) if node is not None and node.type == "identifier" else ""


def _receiver_of_data_ptr(node: Any) -> Any:
    """`y.data_ptr<float>()` -> y; anything else unchanged."""
    while node is not None and node.type in ("cast_expression", "parenthesized_expression"):
        node = node.child_by_field_name("value") or (node.named_children[-1] if node.named_children else None)
    if node is not None and node.type == "call_expression" and (m := _method(node)) is not None:
        return m[0]
    return node


def _contains_call(node: Any, pred: Any) -> Any:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "call_expression" and pred(n):
            return n
        stack.extend(n.children)
    return None


def _has_data_ptr(node: Any) -> bool:
    return _contains_call(node, lambda c: (m := _method(c)) is not None and m[1] in (
        "data_ptr", "const_data_ptr", "mutable_data_ptr")) is not None


def _in_error(node: Any) -> bool:
    n = node
    while n is not None:
        if n.type == "ERROR" or n.is_missing:
            return True
        n = n.parent
    return False


def _storage(decl: Any) -> set[str]:
    return {_text(c) for c in decl.children if c.type in ("storage_class_specifier", "type_qualifier")}


def _type_text(decl: Any) -> str:
    t = decl.child_by_field_name("type")
    return _WS.sub(" ", _text(t)) if t is not None else ""


# -- per-function facts ----------------------------------------------------------------------------------------

@dataclass
class _Func:
    node: Any
    name: str
    device: bool                                  # __global__ / __device__ (no tensors, no host APIs there)
    half_typed: bool                              # a half-precision path of a generic kernel (params/return)
    tensors: set[str] = field(default_factory=set)
    tensor_lists: set[str] = field(default_factory=set)
    others: set[str] = field(default_factory=set)          # declared with a type that is not a tensor
    launches: bool = False
    statics: dict[str, str] = field(default_factory=dict)   # static locals: name -> type


# -- the scanner -----------------------------------------------------------------------------------------------

@dataclass
class CppFacts:
    """What scan_candidate needs across files: does the candidate launch a kernel of its own?"""

    has_kernel: bool = False


class _Scan:
    def __init__(self, name: str, raw: str, task_dtype: str, shapes: set[int], policy: str,
                 line_offset: int = 0, fragment: bool = False, known_functions: set[str] | None = None):
        self.name, self.raw, self.dtype, self.shapes, self.policy = name, raw, task_dtype, shapes, policy
        self.offset, self.fragment = line_offset, fragment
        self.lines = raw.splitlines()
        self.src = raw.encode("utf-8", "replace")
        self.tree = _parse(self.src)
        self.caps = _captures(self.tree.root_node)
        for v in self.caps.values():
            v.sort(key=lambda n: n.start_byte)
        self.found: list[Finding] = []
        self.facts = CppFacts()
        self.funcs: dict[int, _Func] = {}
        self.known_functions = set(known_functions or ())
        self.return_tensor_funcs: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.using_torch = False
        self.persistent: dict[str, str] = {}       # namespace-scope / static members: name -> type
        self._ranges: list[_Func] = []
        self._starts: list[int] = []

    # -- reporting
    def add(self, hack: str, status: str, node: Any, reason: str, confidence: float = 1.0,
            library: str = "") -> None:
        if status == FAIL and _in_error(node):
            status, confidence = SUSPICIOUS, min(confidence, 0.5)
            reason += " (in a region the parser could not read: a person confirms)"
        line = node.start_point[0] + 1
        snippet = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(hack, status, self.name, line + self.offset, reason, snippet, confidence, library))

    # -- context
    def func_of(self, node: Any) -> _Func | None:
        """The innermost function definition around `node` (by byte range: a parent walk per node is slow)."""
        pos = node.start_byte
        i = bisect.bisect_right(self._starts, pos) - 1
        while i >= 0:
            f = self._ranges[i]
            if f.node.start_byte <= pos < f.node.end_byte and f.node.id != node.id:
                return f
            i -= 1
        return None

    def host(self, node: Any) -> bool:
        f = self.func_of(node)
        return f is None or not f.device

    def resolve(self, qualified: str) -> str:
        head, sep, rest = qualified.partition("::")
        if sep and head in self.aliases:
            return self.aliases[head] + "::" + rest
        return qualified

    # -- pass 1: functions, declarations, types
    def collect(self) -> None:
        self._collect_functions()
        self._ranges.sort(key=lambda f: f.node.start_byte)
        self._starts = [f.node.start_byte for f in self._ranges]
        self._collect_rest()

    def _collect_functions(self) -> None:
        for fn in self.caps.get("func", []):
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            fname = _name(decl.child_by_field_name("declarator")) if decl is not None else ""
            quals = {c.type for c in fn.children}
            device = bool(quals & {"__global__", "__device__"})
            if "__global__" in quals:
                self.facts.has_kernel = True
            rtype = _text(fn.child_by_field_name("type"))
            params = decl.child_by_field_name("parameters") if decl is not None else None
            ptypes = [_type_text(p) + " " + _text(p.child_by_field_name("declarator"))
                      for p in (params.named_children if params is not None else [])]
            half_typed = any(self._is_half_type_text(t) for t in [rtype] + ptypes) or self._specialised_half(fn)
            f = _Func(fn, fname.split("::")[-1], device, half_typed)
            if params is not None:
                for p in params.named_children:
                    ident = _declared_name(p.child_by_field_name("declarator"))
                    if ident is None:
                        continue
                    t = _type_text(p)
                    if TENSOR_TYPE.match(t):
                        f.tensors.add(_text(ident))
                    elif TENSOR_CONTAINER.search(t):
                        f.tensor_lists.add(_text(ident))
                    elif "auto" not in t and "Tensor" not in t:
                        f.others.add(_text(ident))
            self.funcs[fn.id] = f
            self._ranges.append(f)
            self.known_functions.add(f.name)
            if TENSOR_TYPE.match(rtype):
                self.return_tensor_funcs.add(f.name)

    def _collect_rest(self) -> None:
        for node in self.caps.get("decl", []):
            for d in _declarators(node):
                if d.type == "function_declarator" or (d.child_by_field_name("declarator") is not None and
                                                       d.child_by_field_name("declarator").type == "function_declarator"):
                    inner = d if d.type == "function_declarator" else d.child_by_field_name("declarator")
                    fname = _name(inner.child_by_field_name("declarator")).split("::")[-1]
                    self.known_functions.add(fname)
                    if TENSOR_TYPE.match(_type_text(node)):
                        self.return_tensor_funcs.add(fname)
        for node in self.caps.get("alias", []):
            ids = [c for c in node.named_children]
            if len(ids) >= 2:
                self.aliases[_text(ids[0])] = _name(ids[-1])
        for node in self.caps.get("using", []):
            t = _WS.sub(" ", _text(node))
            if re.match(r"using namespace (torch|at)\b", t):
                self.using_torch = True
        for node in self.caps.get("launch", []):
            self.facts.has_kernel = True
            f = self.func_of(node)
            if f is not None:
                f.launches = True
        for node in self.caps.get("call", []):
            callee = _name(_callee(node))
            f = self.func_of(node)
            if f is None:
                continue
            short = callee.split("::")[-1]
            if LAUNCH_CALLS.match(short) or (short in self.known_functions and short != f.name
                                             and "::" not in callee):
                f.launches = True
        # Local declarations in source order: types and `auto` inferred from tensor-valued initialisers.
        for node in self.caps.get("decl", []):
            f = self.func_of(node)
            t = _type_text(node)
            storage = _storage(node)
            for d in _declarators(node):
                ident = _declared_name(d)
                if ident is None:
                    continue
                name = _text(ident)
                if f is None:
                    if self._namespace_scope(node) and not PERSISTENT_SKIP.search(" ".join(storage) + " " + t) \
                            and not (("const" in storage) and "*" not in _text(d)):
                        self.persistent[name] = t
                    continue
                if "static" in storage and not PERSISTENT_SKIP.search(t) and \
                        not ("const" in storage and "*" not in _text(d)):
                    f.statics[name] = t
                if TENSOR_TYPE.match(t):
                    f.tensors.add(name)
                elif TENSOR_CONTAINER.search(t):
                    f.tensor_lists.add(name)
                elif "auto" in t and (v := _value(d)) is not None and self.tensor_expr(v, f):
                    f.tensors.add(name)
                elif "auto" not in t and "Tensor" not in t:
                    f.others.add(name)
                elif "auto" in t and (v := _value(d)) is not None and not self._may_be_tensor(v, f):
                    f.others.add(name)
        for node in self.caps.get("field", []):
            if "static" in _storage(node):
                for d in _declarators(node):
                    ident = _declared_name(d)
                    if ident is not None:
                        self.persistent[_text(ident)] = _type_text(node)

    def _namespace_scope(self, node: Any) -> bool:
        n = node.parent
        while n is not None:
            if n.type in ("function_definition", "compound_statement", "lambda_expression",
                          "field_declaration_list", "parameter_list", "for_statement", "template_declaration"):
                return False
            if n.type == "translation_unit":
                return True
            n = n.parent
        return False

    @staticmethod
    def _is_half_type_text(t: str) -> bool:
        return bool(HALF_TEXT.search(t))

    def _specialised_half(self, fn: Any) -> bool:
        p = fn.parent
        if p is not None and p.type == "template_declaration":
            params = p.child_by_field_name("parameters")
            if params is not None and not params.named_children:
                # template<> ...<__half>: an explicit specialisation for a half type
                return self._is_half_type_text(_text(fn.child_by_field_name("declarator")))
        return False

    def _may_be_tensor(self, node: Any, f: _Func) -> bool:
        """False where an `auto` initialiser cannot be a tensor: literals, arithmetic on non-tensors, calls to
        functions outside torch/at that the file does not declare as returning one."""
        if node.type in ("number_literal", "string_literal", "true", "false", "char_literal", "sizeof_expression"):
            return False
        if node.type == "identifier":
            return _text(node) not in f.others
        if node.type == "call_expression":
            m = _method(node)
            if m is not None:
                return m[1] not in NON_TENSOR_METHODS and (m[0] is None or self._may_be_tensor(m[0], f))
            parts = self.resolve(_name(_callee(node))).split("::")
            return parts[0] in ("torch", "at") or parts[-1] in self.return_tensor_funcs
        if node.type in ("binary_expression", "parenthesized_expression", "unary_expression", "cast_expression"):
            return any(self._may_be_tensor(c, f) for c in node.named_children if c.type != "type_descriptor")
        return True

    # -- tensor typing
    def tensor_expr(self, node: Any, f: _Func | None) -> bool:
        if node is None or f is None or f.device:
            return False
        t = node.type
        if t == "identifier":
            return _text(node) in f.tensors
        if t in ("parenthesized_expression",):
            return any(self.tensor_expr(c, f) for c in node.named_children)
        if t == "subscript_expression":
            base = node.child_by_field_name("argument")
            return base is not None and base.type == "identifier" and _text(base) in f.tensor_lists
        if t == "pointer_expression" and _text(node).startswith("*"):
            return False
        if t == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            return op in "+-*/" and (self.tensor_expr(node.child_by_field_name("left"), f) or
                                     self.tensor_expr(node.child_by_field_name("right"), f))
        if t == "conditional_expression":
            return self.tensor_expr(node.child_by_field_name("consequence"), f) or \
                self.tensor_expr(node.child_by_field_name("alternative"), f)
        if t == "call_expression":
            m = _method(node)
            if m is not None:
                recv, meth = m
                if meth in ("value", "clone", "contiguous") and recv is not None and recv.type == "identifier" and \
                        _text(recv) in f.tensor_lists:
                    return True
                return meth not in NON_TENSOR_METHODS and self.tensor_expr(recv, f)
            callee = self.resolve(_name(_callee(node)))
            parts = callee.split("::")
            if parts[0] in ("torch", "at") and len(parts) >= 2:
                return parts[-1] not in NON_TENSOR_FUNCS and not parts[-1].startswith(("k", "is_", "get"))
            return parts[-1] in self.return_tensor_funcs
        return False

    # -- pass 2: rules
    def run(self) -> None:
        self.collect()
        self.rule_library_calls()
        self.rule_tensor_ops()
        self.rule_try_catch()
        self.rule_threads()
        self.rule_streams()
        if not self.fragment:
            self.rule_persistent_state()
        self.rule_precision()
        self.rule_shapes()
        if not self.fragment:
            self.rule_macros()

    def _compute_use(self, node: Any, what: str, confidence: float = 0.95, library: str = "ATen") -> None:
        """ATen compute at `node`: a fallback when on a branch (or in a catch) of a function that also launches
        the candidate's own kernel, else a plain library use."""
        f = self.func_of(node)
        if f is not None and f.launches and self._on_branch(node, f.node):
            self.add(ATEN_FALLBACK, fallback_status(self.policy), node,
                     f"{what} on a branch of a function that also launches the candidate's kernel: a fallback to "
                     "ATen for inputs the kernel does not handle", confidence, library)
            return
        status = library_use_status(self.policy)
        self.add(TORCH_COMPUTE, status, node,
                 f"{what}: ATen computes part of the result" + (
                     " instead of the candidate's kernel" if status == FAIL else " (allowed by the engineering policy)"),
                 confidence, library)

    @staticmethod
    def _on_branch(node: Any, stop: Any) -> bool:
        n, child = node.parent, node
        while n is not None and n.id != stop.id:
            if n.type == "if_statement" and child.id != (n.child_by_field_name("condition") or child).id:
                return True
            if n.type in ("catch_clause", "case_statement"):
                return True
            if n.type == "conditional_expression" and child.id != (n.child_by_field_name("condition") or child).id:
                return True
            n, child = n.parent, n
        return False

    def rule_library_calls(self) -> None:
        for call in self.caps.get("call", []):
            if not self.host(call):
                fnode = _callee(call)
                callee = _name(fnode)
                if callee.startswith(("cublas", "cudnn")):   # device-side library APIs (cuBLASDx...) stay tagged
                    self._vendor(call, callee, self._vendor_name(callee) or "cuBLAS")
                continue
            fnode = _callee(call)
            if fnode is None:
                continue
            callee = self.resolve(_name(fnode))
            short = callee.split("::")[-1]
            lib = self._vendor_name(callee)
            if lib:
                self._vendor(call, callee, lib)
                continue
            if short in TF32_SWITCHES and self.dtype == "float32":
                self.add(LOWER_PRECISION, FAIL, call, f"calls {short}: lets cuBLAS/cuDNN round float32 to "
                         "TF32 or reduce in lower precision in a float32 task")
                continue
            parts = callee.split("::")
            if parts[0] in ("torch", "at", "c10") and len(parts) >= 2 and fnode.type != "field_expression":
                ns, path, fn = parts[0], "::".join(parts[1:-1]) + ("::" if len(parts) > 2 else ""), parts[-1]
                if ns == "c10" and not path.startswith(("nn", "native")):
                    continue
                if any(path.startswith(p) for p in COMPUTE_NAMESPACES) or (
                        not path and fn in TORCH_COMPUTE_FUNCS and fn not in ALLOWED_TORCH_FUNCS):
                    self._compute_use(call, f"calls {callee}")
                elif not path and fn[:1].islower() and fn not in ALLOWED_TORCH_FUNCS and \
                        not fn.startswith(("is_", "k", "get", "set")):
                    status = SUSPICIOUS if self.policy == "pure" else INFO
                    self.add(TORCH_COMPUTE, status, call, f"calls {callee}, which is neither an allocation, view or "
                             "check function nor a known compute op: it may compute part of the result in ATen",
                             0.5, "ATen")
            elif self.using_torch and len(parts) == 1 and fn_unqualified_compute(short) and \
                    short not in self.known_functions:
                self.add(TORCH_COMPUTE, SUSPICIOUS if self.policy == "pure" else INFO, call,
                         f"calls {short} unqualified under `using namespace torch/at`: it may be an ATen compute op",
                         0.5, "ATen")
        # CUTLASS device-level operators appear as types (using Gemm = cutlass::gemm::device::Gemm<...>).
        seen: set[int] = set()
        for q in self.caps.get("qual", []):
            if q.parent is not None and q.parent.type == "qualified_identifier":
                continue
            if CUTLASS_LIBRARY.match(_name(q)):
                line = q.start_point[0]
                if line not in seen:
                    seen.add(line)
                    self._vendor(q, _name(q), "CUTLASS")

    @staticmethod
    def _vendor_name(callee: str) -> str:
        short = callee.split("::")[-1]
        for prefix, lib in VENDOR_PREFIX:
            if short.startswith(prefix):
                return lib
        if short in VENDOR_HANDLES:
            return VENDOR_HANDLES[short]
        parts = callee.split("::")
        if parts[0] == "cub" and len(parts) >= 2 and parts[1].startswith("Device"):
            return "CUB"
        if parts[0] == "thrust" and len(parts) >= 2 and parts[-1] not in THRUST_UTILITIES:
            return "Thrust"
        if CUTLASS_LIBRARY.match(callee):
            return "CUTLASS"
        return ""

    def _vendor(self, node: Any, callee: str, lib: str) -> None:
        status = library_use_status(self.policy)
        self.add(VENDOR_LIBRARY, status, node,
                 f"calls {callee}: {lib} " + ("computes what the candidate must compute itself (pure policy)"
                                             if status == FAIL else "use, allowed by the engineering policy"),
                 0.95, lib)

    def rule_tensor_ops(self) -> None:
        for call in self.caps.get("call", []):
            m = _method(call)
            if m is None or m[1] not in COMPUTE_METHODS:
                if m is not None and m[1] in ("half", "bfloat16") and self.dtype == "float32":
                    f = self.func_of(call)
                    if f is not None and not f.device and self.tensor_expr(m[0], f):
                        self.add(LOWER_PRECISION, FAIL, call, f"converts a tensor with .{m[1]}() in a float32 task")
                continue
            f = self.func_of(call)
            if f is None or f.device:
                continue
            recv, meth = m
            if self.tensor_expr(recv, f):
                self._compute_use(call, f"tensor method .{meth}()")
            elif recv is not None and recv.type == "identifier" and _text(recv) not in f.tensors and \
                    self._torch_file():
                # A receiver of unknown type: a person looks (a struct of the candidate's may have such a method).
                if _text(recv) not in f.others and _text(recv) not in self.known_functions:
                    self.add(TORCH_COMPUTE, SUSPICIOUS if self.policy == "pure" else INFO, call,
                             f"method .{meth}() on `{_text(recv)}`, whose type the scanner cannot tell: if it is a "
                             "tensor, ATen computes part of the result", 0.4, "ATen")
        for node in self.caps.get("bin", []):
            op = _text(node.child_by_field_name("operator"))
            if op not in ("+", "-", "*", "/", "%", "@"):
                continue
            f = self.func_of(node)
            if f is None or f.device:
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if self.tensor_expr(left, f) or self.tensor_expr(right, f):
                # report the outermost tensor expression once
                p = node.parent
                while p is not None and p.type == "parenthesized_expression":
                    p = p.parent
                if p is not None and p.type == "binary_expression" and self.tensor_expr(p, f):
                    continue
                self._compute_use(node, f"operator {op} on tensors")
        for node in self.caps.get("assign", []):
            op = _text(node.child_by_field_name("operator"))
            if op in ("+=", "-=", "*=", "/=") and self.tensor_expr(node.child_by_field_name("left"), self.func_of(node)):
                self._compute_use(node, f"operator {op} on a tensor")
        for node in self.caps.get("unary", []):
            if _text(node.child_by_field_name("operator")) == "-" and \
                    self.tensor_expr(node.child_by_field_name("argument"), self.func_of(node)):
                self._compute_use(node, "unary minus on a tensor")

    def _torch_file(self) -> bool:
        return "torch" in self.raw or "ATen" in self.raw or "at::" in self.raw

    def rule_try_catch(self) -> None:
        for node in self.caps.get("try", []):
            for clause in (c for c in node.children if c.type == "catch_clause"):
                body = clause.child_by_field_name("body")
                if body is None:
                    continue
                rethrows = "throw" in {n.type for n in _walk(body)} or _contains_call(
                    body, lambda c: RETHROW_CALLS.match(_name(_callee(c)) or "")) is not None
                returns = any(n.type == "return_statement" for n in _walk(body))
                computes = _contains_call(body, lambda c: self._computes(c)) is not None or \
                    any(n.type == "kernel_call_syntax" for n in _walk(body))
                if rethrows and not returns:
                    continue
                if returns or computes:
                    self.add(TRY_CATCH, fallback_status(self.policy), clause,
                             "a catch clause that returns or computes a result: a fallback path that hides the "
                             "candidate's kernel failing (it rethrows nothing)", 0.9)
                else:
                    self.add(TRY_CATCH, SUSPICIOUS, clause, "a catch clause swallows an error and goes on: a failing "
                             "kernel could go unnoticed", 0.5)

    def _computes(self, call: Any) -> bool:
        callee = self.resolve(_name(_callee(call)))
        parts = callee.split("::")
        if parts[0] in ("torch", "at") and parts[-1] not in ALLOWED_TORCH_FUNCS:
            return True
        m = _method(call)
        return (m is not None and m[1] in COMPUTE_METHODS) or bool(self._vendor_name(callee)) or \
            parts[-1] in self.known_functions

    def rule_threads(self) -> None:
        creators: list[tuple[Any, str]] = []
        for call in self.caps.get("call", []):
            callee = _name(_callee(call))
            if callee in THREAD_CALLS:
                creators.append((call, THREAD_CALLS[callee]))
            elif callee.split("::")[-1] in HOST_CALLBACKS:
                self.add(HOST_THREAD, SUSPICIOUS, call, f"{callee.split('::')[-1]}: a host callback on the stream; "
                         "its work is outside the candidate's kernels (a person checks what it does)", 0.6)
        for node in self.caps.get("decl", []):
            if THREAD_TYPES.match(_name(node.child_by_field_name("type"))):
                creators.append((node, _name(node.child_by_field_name("type"))))
        for node, what in creators:
            f = self.func_of(node)
            scope = f.node if f is not None else node
            calls = {m[1] for c in _walk(scope) if c.type == "call_expression" and (m := _method(c)) is not None}
            callees = {_name(_callee(c)) for c in _walk(scope) if c.type == "call_expression"}
            joined = bool({"join", "get", "wait"} & calls) or "pthread_join" in callees
            detached = "detach" in calls or "pthread_detach" in callees
            if detached or not joined:
                self.add(HOST_THREAD, FAIL, node, f"{what} {'detached' if detached else 'never joined'}: work on a "
                         "host thread outlives the call and escapes the timed stream", 0.95)
            else:
                self.add(HOST_THREAD, SUSPICIOUS, node, f"{what}, joined before the call returns: host work inside the "
                         "call (a person checks what the thread does)", 0.5)
        for node in self.caps.get("pcall", []):
            t = _WS.sub(" ", _text(node)).strip()
            if re.match(r"#\s*pragma omp\b", t):
                self.add(HOST_THREAD, SUSPICIOUS, node, "OpenMP in the candidate: host threads do work inside the "
                         "call (a person checks what they do)", 0.5)

    def rule_streams(self) -> None:
        side: dict[str, Any] = {}
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if callee in STREAM_SOURCES:
                owner = self._assigned_to(call)
                if owner:
                    side[owner] = call
                else:
                    side[f"<{callee}@{call.start_byte}>"] = call
            elif STREAM_CREATE.match(callee):
                args = call.child_by_field_name("arguments")
                first = args.named_children[0] if args is not None and args.named_children else None
                ident = _base_name(first)
                if ident:
                    side[ident] = call
        per_thread = [i for i in self.caps.get("ident", []) if _text(i) == "cudaStreamPerThread"]
        names = {n for n in side if not n.startswith("<")}
        used: dict[str, Any] = {}
        for launch in self.caps.get("launch", []):
            args = [c for c in launch.named_children]
            if len(args) >= 4 and (hit := _mentions(args[3], names | {"cudaStreamPerThread"})):
                _last(used, hit, launch)
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if STREAM_NON_WORK.match(callee) or callee in STREAM_SOURCES:
                continue
            args = call.child_by_field_name("arguments")
            m = _method(call)
            recv_hit = m is not None and m[0] is not None and m[0].type == "identifier" and _text(m[0]) in names \
                and m[1] not in ("stream", "id", "query", "synchronize", "device", "device_index", "priority")
            hit = _mentions(args, names | {"cudaStreamPerThread"}) if args is not None else None
            if hit or recv_hit:
                _last(used, hit or _text(m[0]), call)
        # inline uses of a pooled stream: launch(..., at::cuda::getStreamFromPool().stream())
        for key, call in side.items():
            if key.startswith("<") and call.parent is not None and call.parent.type != "init_declarator":
                _last(used, key, call)
        for ident in per_thread:
            _last(used, "cudaStreamPerThread", ident)
        for key, node in used.items():
            f = self.func_of(node)
            scope = f.node if f is not None else self.tree.root_node
            if not self._joined(scope, names, node.end_byte):
                self.add(SIDE_STREAM, FAIL, node, f"work launched on stream `{key.strip('<>').split('@')[0]}`, "
                         "not the caller's current stream, and never joined back: it escapes the timing events "
                         "(launch on at::cuda::getCurrentCUDAStream())", 0.95)
        for key, node in side.items():
            if key not in used and not key.startswith("<"):
                self.add(SIDE_STREAM, SUSPICIOUS, node, f"creates stream `{key}` that no launch the scanner can see "
                         "uses: a person checks where its work goes", 0.3)

    @staticmethod
    def _assigned_to(call: Any) -> str:
        p = call.parent
        while p is not None and p.type in ("call_expression", "field_expression", "argument_list",
                                          "parenthesized_expression"):
            if p.type == "argument_list":
                return ""
            p = p.parent
        if p is not None and p.type == "init_declarator":
            ident = _declared_name(p)
            return _text(ident) if ident is not None else ""
        if p is not None and p.type == "assignment_expression":
            left = p.child_by_field_name("left")
            ident = next(iter(_idents(left)), None) if left is not None else None
            return _text(ident) if ident is not None else ""
        return ""

    @staticmethod
    def _joined(scope: Any, side: set[str], after: int) -> bool:
        """Is work on the side streams joined back after byte `after`: an event the caller's stream waits
        for (cudaStreamWaitEvent / CUDAEvent::block on a stream that is not a side stream), or a synchronise
        of the side stream or the device?"""
        for n in _walk(scope):
            if n.type != "call_expression" or n.start_byte < after:
                continue
            callee = _name(_callee(n)).split("::")[-1]
            m = _method(n)
            args = n.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            if callee == "cudaStreamWaitEvent" and first is not None and _mentions(first, side) is None:
                return True
            if callee == "cudaDeviceSynchronize" or (callee == "cudaStreamSynchronize" and first is not None
                                                     and _mentions(first, side)):
                return True
            if m is not None and m[1] == "block" and first is not None and _mentions(first, side) is None:
                return True
            if m is not None and m[1] == "synchronize" and m[0] is not None and _mentions(m[0], side):
                return True
        return False

    def rule_persistent_state(self) -> None:
        """State kept between calls fails where it reaches the output: returned (directly, through a local
        alias, a map lookup or a copy) or used to skip the kernel for an input address seen before. A scratch
        buffer, a descriptor cache keyed by address or a logging counter is honest and not reported."""
        for f in self.funcs.values():
            if f.device:
                continue
            persistent = {**self.persistent, **f.statics}
            if not persistent:
                continue
            keyed = {k for n in _walk(f.node) if (k := self._pointer_keyed(n, set(persistent)))}
            holders = {n for n, t in persistent.items() if "Tensor" in t} | keyed
            tainted = set(holders)
            for n in _walk(f.node):   # source order: a flow's source is seen before its uses
                if n.type == "init_declarator":
                    v = _value(n)
                    ident = _declared_name(n)
                    if v is not None and ident is not None and _flows(v, tainted):
                        tainted.add(_text(ident))
                elif n.type == "assignment_expression":
                    left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                    if left is not None and left.type == "identifier" and right is not None and \
                            _flows(right, tainted) and _text(left) not in persistent:
                        tainted.add(_text(left))
                elif n.type == "call_expression":
                    m = _method(n)
                    args = n.child_by_field_name("arguments")
                    if m is not None and m[1] in ("copy_", "set_") and args is not None and _flows(args, tainted):
                        if (dst := _base_name(m[0])) and dst not in persistent:
                            tainted.add(dst)
                    elif re.match(r"^(?:cudaMemcpy\w*|memcpy|std::memcpy)$", _name(_callee(n))) and args is not None \
                            and len(args.named_children) >= 2 and _mentions(args.named_children[1], tainted):
                        if (dst := _base_name(_receiver_of_data_ptr(args.named_children[0]))) and dst not in persistent:
                            tainted.add(dst)
            for n in _walk(f.node):
                if n.type == "return_statement" and (hit := _flows(n, tainted)):
                    source = hit if hit in holders else sorted(holders)[0]
                    self.add(STATIC_CACHE, FAIL, n, f"returns `{hit}`, which carries what persistent `{source}` "
                             f"({persistent.get(source, 'static')}) kept from an earlier call: an output cache", 0.95)
            for n in _walk(f.node):
                key = self._pointer_keyed(n, set(persistent))
                if key is not None and self._early_exit_on(n, f):
                    self.add(STATIC_CACHE, FAIL, n, f"persistent `{key}` compares the input's data_ptr and the call "
                             "returns early on a match: work skipped for an input seen before", 0.9)
            for name, t in f.statics.items():
                if INTEGRAL.search(t) and "*" not in t and CALL_COUNTER.search(name) and \
                        self._incremented(name, f) and self._guards_return(name, f):
                    self.add(STATIC_CACHE, SUSPICIOUS, self._decl_node(name, f) or f.node,
                             f"static counter `{name}` decides an early return: behaviour that depends on how "
                             "often the candidate was called (call-count cache)", 0.6)

    @staticmethod
    def _guards_return(name: str, f: _Func) -> bool:
        for n in _walk(f.node):
            if n.type == "if_statement":
                cond, cons = n.child_by_field_name("condition"), n.child_by_field_name("consequence")
                if cond is not None and _mentions(cond, {name}) and cons is not None and \
                        any(x.type == "return_statement" for x in _walk(cons)):
                    return True
        return False

    def _decl_node(self, name: str, f: _Func) -> Any:
        for n in self.caps.get("decl", []):
            if f.node.start_byte <= n.start_byte < f.node.end_byte and \
                    any(_text(_declared_name(d) or d) == name for d in _declarators(n)):
                return n
        return None

    @staticmethod
    def _incremented(name: str, f: _Func) -> bool:
        for n in _walk(f.node):
            if n.type == "update_expression" and _mentions(n, {name}):
                return True
            if n.type == "assignment_expression" and _text(n.child_by_field_name("operator")) in ("+=", "-=") and \
                    _text(n.child_by_field_name("left")) == name:
                return True
        return False

    def _pointer_keyed(self, n: Any, persistent: set[str]) -> str | None:
        if n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if (hit := _mentions(left, persistent)) and right is not None and _has_data_ptr(right):
                return hit
        elif n.type == "subscript_expression":
            base = n.child_by_field_name("argument")
            if base is not None and _text(base) in persistent and _has_data_ptr(n):
                return _text(base)
        elif n.type == "call_expression":
            m = _method(n)
            if m is not None and m[1] in KEY_METHODS and m[0] is not None and _text(m[0]) in persistent and \
                    _has_data_ptr(n.child_by_field_name("arguments")):
                return _text(m[0])
        elif n.type == "binary_expression" and _text(n.child_by_field_name("operator")) in ("==", "!="):
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            for a, b in ((left, right), (right, left)):
                if a is not None and b is not None and (hit := _mentions(a, persistent)) and _has_data_ptr(b):
                    return hit
        return None

    @staticmethod
    def _early_exit_on(n: Any, f: _Func) -> bool:
        p = n.parent
        while p is not None and p.id != f.node.id:
            if p.type == "condition_clause" and p.parent is not None and p.parent.type == "if_statement":
                cons = p.parent.child_by_field_name("consequence")
                return f.launches and cons is not None and any(x.type == "return_statement" for x in _walk(cons))
            p = p.parent
        return False

    def rule_precision(self) -> None:
        if self.dtype != "float32":
            return
        # lower-precision uses: types in local declarations, casts and template arguments; conversions; PTX
        for node in self.caps.get("type", []):
            if _text(node) in HALF_TYPES:
                self._half_use(node, _text(node))
        for node in self.caps.get("qual", []):
            if node.parent is not None and node.parent.type == "qualified_identifier":
                continue
            name = _name(node)
            if HALF_QUALIFIED.match(name):
                self._half_use(node, name)
            elif HALF_SCALARS.match(name) or (name.endswith(("::kHalf", "::kBFloat16", "::kFloat16"))):
                self._half_dtype_arg(node, name)
        for node in self.caps.get("ident", []):
            t = _text(node)
            if t in ("kHalf", "kBFloat16", "kFloat16") and (node.parent is None or
                                                           node.parent.type != "qualified_identifier"):
                self._half_dtype_arg(node, t)
            elif FAST_MATH_ENUMS.match(t):
                self.add(LOWER_PRECISION, FAIL, node, f"{t}: a library math mode that rounds float32 to TF32/half "
                         "in a float32 task", 0.9)
        for call in self.caps.get("call", []):
            callee = _name(_callee(call)).split("::")[-1]
            if HALF_CALLS.match(callee):
                self._half_use(call, callee + "()")
        for node in self.caps.get("asm", []):
            ptx = self._asm_text(node)
            if m := PTX_LOW.search(ptx):
                self._half_use(node, f"PTX {m.group(0)}")
        # TF32 without the 3xTF32 residual split
        tf32: list[Any] = [c for c in self.caps.get("call", []) if _name(_callee(c)) in TF32_CALLS or
                           _name(_callee(c)).endswith("__float_to_tf32")]
        tf32 += [q for q in self.caps.get("qual", []) if _name(q).endswith("precision::tf32")]
        tf32 += [a for a in self.caps.get("asm", []) if PTX_TF32.search(self._asm_text(a))]
        if tf32 and not self._tf32_split():
            first = min(tf32, key=lambda n: n.start_byte)
            self.add(LOWER_PRECISION, FAIL, first, "TF32 rounding without a hi/lo residual split (3xTF32): products "
                     "keep 10 mantissa bits in a float32 task", 0.9)

    @staticmethod
    def _asm_text(node: Any) -> str:
        return " ".join(_text(s) for s in _walk(node) if s.type in ("string_content", "raw_string_content",
                                                                     "escape_sequence"))

    def _tf32_split(self) -> bool:
        for node in self.caps.get("bin", []):
            if _text(node.child_by_field_name("operator")) != "-":
                continue
            right = node.child_by_field_name("right")
            while right is not None and right.type == "parenthesized_expression" and right.named_children:
                right = right.named_children[0]
            if right is not None and right.type == "call_expression" and \
                    TF32_SPLIT_CALLS.search(_name(_callee(right)) or ""):
                return True
            if right is not None and right.type == "cast_expression" and "float" in _text(right.child_by_field_name("type")):
                return True
            # lo = v - hi, residual = ...: a named residual
            p = node.parent
            while p is not None and p.type == "parenthesized_expression":
                p = p.parent
            target = None
            if p is not None and p.type == "init_declarator":
                target = _declared_name(p)
            elif p is not None and p.type == "assignment_expression":
                target = p.child_by_field_name("left")
            if target is not None and re.search(r"lo|low|res|resid", _text(target)):
                return True
        return False

    def _half_use(self, node: Any, what: str) -> None:
        role = self._type_role(node)
        if role is None:
            return
        f = self.func_of(node)
        if f is not None and f.half_typed or self._in_constexpr_half_branch(node):
            # The half path of a generic kernel: a float32 task only reaches it through a conversion to half,
            # and that conversion is a use this rule reports where it happens.
            return
        self.add(LOWER_PRECISION, FAIL, node, f"{what} ({role}): half/bfloat16/fp8 arithmetic in a float32 task "
                 "(lower precision than the task's dtype)", 0.9)

    def _type_role(self, node: Any) -> str | None:
        """Where a half type or call sits; None where it is no use (parameters, return types, typedefs...)."""
        if node.type in ("call_expression", "gnu_asm_expression"):
            return "a conversion or half arithmetic" if node.type == "call_expression" else "inline PTX"
        n, child = node.parent, node
        while n is not None:
            t = n.type
            if t in ("parameter_declaration", "optional_parameter_declaration", "template_parameter_list",
                     "type_definition", "alias_declaration", "field_declaration", "preproc_arg"):
                return None
            if t == "template_argument_list":
                owner = n.parent
                if owner is not None and _name(owner).split("::")[-1].startswith(("is_same", "is_convertible",
                                                                                   "numeric_limits")):
                    return None
            if t == "cast_expression":
                return "a cast"
            if t == "sizeof_expression":
                return None
            if t == "declaration":
                if any(d.type == "function_declarator" for d in _declarators(n)):
                    return None
                return "a local variable" if self.func_of(n) is not None else None
            if t == "function_definition":
                # the type field is the return type: not a use
                return None if child.id == (n.child_by_field_name("type") or child).id or \
                    child.type == "function_declarator" else "in a function body"
            if t in ("call_expression",) and n.child_by_field_name("function") is not None and \
                    n.child_by_field_name("function").start_byte <= node.start_byte < \
                    n.child_by_field_name("function").end_byte:
                return "a template argument of a call"
            if t in ("compound_statement",):
                return "in a function body"
            if t == "translation_unit":
                return None
            n, child = n.parent, n
        return None

    def _in_constexpr_half_branch(self, node: Any) -> bool:
        n = node.parent
        while n is not None and n.type != "function_definition":
            if n.type == "if_statement" and "constexpr" in {c.type for c in n.children}:
                cond = n.child_by_field_name("condition")
                if cond is not None and self._is_half_type_text(_text(cond)):
                    return True
            n = n.parent
        return False

    def _half_dtype_arg(self, node: Any, name: str) -> None:
        """kHalf/ScalarType::Half: a use only as the dtype of a conversion or an allocation."""
        p = node.parent
        while p is not None and p.type not in ("argument_list", "condition_clause", "case_statement",
                                               "binary_expression", "compound_statement", "init_declarator"):
            p = p.parent
        if p is None or p.type != "argument_list":
            return
        call = p.parent
        callee = _name(call.child_by_field_name("function") if call is not None else None)
        m = _method(call) if call is not None and call.type == "call_expression" else None
        short = m[1] if m else callee.split("::")[-1]
        if short in LOW_DTYPE_CALLS:
            self.add(LOWER_PRECISION, FAIL, node, f"{name} as the dtype of {short}(): a tensor converted or "
                     "allocated in lower precision in a float32 task", 0.9)

    def rule_shapes(self) -> None:
        if not self.shapes:
            return
        for node in self.caps.get("bin", []):
            op = _text(node.child_by_field_name("operator"))
            if op not in ("==", "!="):
                continue
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            for a, b in ((left, right), (right, left)):
                lit = _int_literal(b)
                if lit is not None and lit in self.shapes and self._size_expr(a):
                    self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"compares a size with the literal {lit}, one "
                             "of the task's config sizes: code specialised to a benchmark shape", 0.6)
                    break
        for node in self.caps.get("def", []):
            name, value = _text(node.child_by_field_name("name")), _text(node.child_by_field_name("value"))
            lit = _int_text(value)
            if lit is not None and lit in self.shapes and SHAPE_NAME.match(name):
                self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"constant {name} = {lit} equals a config size: a "
                         "problem dimension hard-coded at compile time", 0.5)
        for node in self.caps.get("decl", []):
            storage = _storage(node)
            if not ({"const", "constexpr"} & storage or "constexpr" in _text(node).split()):
                continue
            if not INTEGRAL.search(_type_text(node)):
                continue
            for d in _declarators(node):
                ident, v = _declared_name(d), _value(d)
                lit = _int_literal(v) if v is not None else None
                if ident is not None and lit is not None and lit in self.shapes and SHAPE_NAME.match(_text(ident)):
                    self.add(SHAPE_SPECIALISATION, SUSPICIOUS, node, f"constant {_text(ident)} = {lit} equals a "
                             "config size: a problem dimension hard-coded at compile time", 0.5)

    @staticmethod
    def _size_expr(node: Any) -> bool:
        if node is None:
            return False
        if node.type == "identifier":
            return _text(node) in SIZE_NAMES
        if node.type == "call_expression":
            m = _method(node)
            return m is not None and m[1] in SIZE_METHODS
        if node.type == "subscript_expression":
            return _Scan._size_expr(node.child_by_field_name("argument"))
        if node.type == "field_expression":
            return _text(node.child_by_field_name("field")) in SIZE_NAMES
        if node.type in ("parenthesized_expression", "cast_expression"):
            return any(_Scan._size_expr(c) for c in node.named_children)
        return False

    def rule_macros(self) -> None:
        """Parse each macro body as a statement fragment: calls hidden in #defines are still seen."""
        for node in self.caps.get("def", []) + self.caps.get("fdef", []):
            body = node.child_by_field_name("value")
            if body is None:
                continue
            text = _text(body).replace("\\\n", "\n")
            if not re.search(r"[A-Za-z_]\w*\s*(?:<[^;]*>)?\s*\(", text):
                continue
            sub = _Scan(self.name, "void __kbench_macro__() {\n" + text + "\n;}\n", self.dtype, set(), self.policy,
                        self.offset + node.start_point[0] - 1, fragment=True, known_functions=self.known_functions)
            sub.run()
            for fd in sub.found:
                if fd.hack in (STATIC_CACHE, SHAPE_SPECIALISATION):
                    continue
                self.found.append(Finding(fd.hack, fd.status, fd.file, fd.line, fd.reason + " (in a macro)",
                                          _snippet(self.lines, fd.line - self.offset), fd.confidence, fd.library))
            self.facts.has_kernel |= sub.facts.has_kernel


def fn_unqualified_compute(name: str) -> bool:
    return name in TORCH_COMPUTE_FUNCS and name not in ("max", "min", "abs", "exp", "log", "sqrt", "pow", "sort")


def _last(uses: dict[str, Any], key: str, node: Any) -> None:
    """Keep the last use of each stream: a join must come after it."""
    if key not in uses or uses[key].end_byte < node.end_byte:
        uses[key] = node


def _snippet(lines: list[str], line: int) -> str:
    return lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""


def _walk(node: Any) -> Iterable[Any]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _int_text(text: str) -> int | None:
    t = text.strip().strip("()").strip().rstrip("uUlL")
    return int(t) if t.isdigit() else None


def _int_literal(node: Any) -> int | None:
    if node is None:
        return None
    while node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    return _int_text(_text(node)) if node.type == "number_literal" else None


def scan_cpp_source(name: str, raw: str, *, task_dtype: str = "float32", shape_values: Iterable[int] = (),
                    policy: str = "pure", line_offset: int = 0) -> tuple[list[Finding], CppFacts]:
    """Findings for one C++/CUDA source, and the facts the candidate-level rules need."""
    shapes = {v for v in shape_values if isinstance(v, int) and v >= 8}
    scan = _Scan(name, raw, task_dtype, shapes, policy, line_offset)
    scan.run()
    return scan.found, scan.facts
