"""What a static rule reports: a Finding, the catalog's rule ids, and how the library policy rates a use.

Statuses: `fail` (the construct is unambiguous: it stops the evaluation unless a person overrides it),
`suspicious` (a person should look; the evaluation goes on) and `info` (a library use the policy allows,
tagged on the verdict so a person sees it). Every finding carries a confidence in [0, 1]: how sure the rule
is that the construct means what the reason says (1.0 for a direct call, lower where a type is inferred).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# -- rule ids: the INTEGRITY.md catalog ----------------------------------------------------------------------
TORCH_COMPUTE = "torch-compute"
VENDOR_LIBRARY = "vendor-library"
ATEN_FALLBACK = "aten-fallback"
NO_OWN_KERNEL = "no-own-kernel"
TRY_CATCH = "try-catch-fallback"
HOST_THREAD = "host-thread"
SIDE_STREAM = "side-stream"
STATIC_CACHE = "static-cache"
LOWER_PRECISION = "lower-precision"
SHAPE_SPECIALISATION = "shape-specialisation"
MONKEY_PATCH = "monkey-patch"
REFERENCE_IMPORT = "reference-import"
SYNTAX = "syntax"
FOREIGN_FILE = "foreign-file"

RULES = (TORCH_COMPUTE, VENDOR_LIBRARY, ATEN_FALLBACK, NO_OWN_KERNEL, TRY_CATCH, HOST_THREAD, SIDE_STREAM,
         STATIC_CACHE, LOWER_PRECISION, SHAPE_SPECIALISATION, MONKEY_PATCH, REFERENCE_IMPORT, SYNTAX, FOREIGN_FILE)

FAIL, SUSPICIOUS, INFO = "fail", "suspicious", "info"


@dataclass(frozen=True)
class Finding:
    hack: str              # the rule id (RULES)
    status: str            # fail | suspicious | info
    file: str
    line: int
    reason: str
    snippet: str = ""
    confidence: float = 1.0
    library: str = ""      # for library uses: ATen, cuBLAS, cuDNN, CUTLASS, CUB, Thrust...

    def describe(self) -> str:
        return f"{self.hack}: {self.file}:{self.line}: {self.reason}" + (f" [{self.snippet}]" if self.snippet else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def library_use_status(policy: str) -> str:
    """A library or ATen call that computes part of the result."""
    return FAIL if policy == "pure" else INFO


def fallback_status(policy: str) -> str:
    """A path to ATen (or a swallowed error) taken for inputs the candidate's kernel does not handle."""
    return FAIL if policy == "pure" else SUSPICIOUS
