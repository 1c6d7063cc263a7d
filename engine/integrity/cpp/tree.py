"""The syntax-tree access layer of the C++/CUDA rules: the tree-sitter CUDA grammar and its query, parsing,
and small node helpers (names, callees, declarators, identifiers, flows, literals). No rule lives here.

Lazy imports: tree_sitter and its CUDA grammar, on first use: they are optional (without them `parser_available`
says why and the static stage is skipped), and slow to load."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Iterable

from engine.integrity.cpp.vocab import NON_TENSOR_METHODS

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
((identifier) @ident (#match? @ident
"^(cudaStreamPerThread|kHalf|kBFloat16|kFloat16|CUBLAS_[A-Z0-9_]+|CUDNN_[A-Z0-9_]+)$"))
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
