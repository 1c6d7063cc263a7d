"""What crosses between the judge and the runner, and how the judge reads it without trusting it.

Two channels, both inherited descriptors:
- control (a socketpair, both ways): framed messages, a JSON header followed by raw tensor bytes. The judge
  sends the candidate's arguments and jobs; the runner answers with status lines. The headers are the typed
  messages of engine/pipeline/protocol/messages.py. Nothing the runner says on it is evidence: the judge only learns
  from it that the runner is alive and why it could not go on.
- records (a pipe, runner to judge): written only by the compiled timing helper, each record numbered and
  signed with HMAC-SHA256 under a key the judge generated and the helper read from a third descriptor
  before any candidate code ran. Outputs ride on records as a signed header (shape, dtype, a keyed
  fingerprint of the bytes) followed by the bytes, or with the bytes in the shared arena's slot
  (engine/pipeline/protocol/arena.py; the header says `"arena": 1`), which the judge's decoder takes in order.
Large arguments of a `config` message likewise travel in the arena (their metas carry `arena_offset`).

The judge never unpickles anything: headers are JSON, tensor bytes become tensors through `frombuffer`.

Lazy imports: torch, in the functions that handle tensors. The runner imports this module before it jails
itself, and torch must load only after the jail (engine/pipeline/runner/main.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from engine.pipeline.protocol.messages import MessageError

MAX_HEADER = 64 << 20
RECORD_MAGIC = b"KBR1"
HEADER = struct.Struct("<4sIQQI")      # magic, type, seq, job, body length
MAC_BYTES = 32
MAX_BODY = 1 << 20
HELLO, JOB_BEGIN, ITER, OUTPUT, JOB_END, ERROR = 6, 1, 2, 3, 4, 5
RECORD_NAMES = {HELLO: "hello", JOB_BEGIN: "job-begin", ITER: "iter", OUTPUT: "output", JOB_END: "job-end",
                ERROR: "error"}

# c10::toString names (what the helper writes) and torch names (what the control channel uses) -> torch dtype name
C10_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
              "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
              "ComplexFloat": "complex64", "ComplexDouble": "complex128", "Float8_e4m3fn": "float8_e4m3fn",
              "Float8_e5m2": "float8_e5m2"}


class ChannelClosed(EOFError):
    pass


class Forgery(Exception):
    """A record that the helper did not write: bad signature, a gap or repeat in the numbering, garbage."""


# ---------------------------------------------------------------------------------------------- tensors
def dtype_of(name: str) -> Any:
    import torch
    name = C10_DTYPES.get(name, name)
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def tensor_meta(t: Any) -> dict[str, Any]:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "strides": list(t.stride()),
            "nbytes": t.numel() * t.element_size()}


def tensor_from_bytes(meta: dict[str, Any], data: bytes | bytearray | memoryview, device: Any = "cpu") -> Any:
    """A tensor with `meta`'s dtype, shape and (where they fit) strides, from contiguous bytes."""
    import torch
    dtype = dtype_of(str(meta["dtype"]))
    shape = [int(s) for s in meta["shape"]]
    if len(data) != int(math.prod(shape)) * torch.empty(0, dtype=dtype).element_size():
        raise Forgery(f"{len(data)} bytes for a {dtype} tensor of shape {shape}")
    # a bytearray we were handed is ours to wrap (no copy: tensors can be GBs); anything else is copied once
    buf = data if isinstance(data, bytearray) else bytearray(data)
    flat = torch.frombuffer(buf, dtype=torch.uint8) if len(buf) else torch.empty(0, dtype=torch.uint8)
    t = flat.view(dtype).reshape(shape) if flat.numel() else torch.empty(shape, dtype=dtype)
    return restride(t.to(device), meta.get("strides"), device)


def device_tensor(meta: dict[str, Any], flat: Any) -> Any:
    """A contiguous tensor with `meta`'s dtype and shape over `flat`, a uint8 tensor of exactly its bytes."""
    import torch
    dtype = dtype_of(str(meta["dtype"]))
    shape = [int(s) for s in meta["shape"]]
    if flat.numel() != int(math.prod(shape)) * torch.empty(0, dtype=dtype).element_size():
        raise Forgery(f"{flat.numel()} bytes for a {dtype} tensor of shape {shape}")
    return flat.view(dtype).reshape(shape) if flat.numel() else torch.empty(shape, dtype=dtype, device=flat.device)


def restride(t: Any, strides: Any, device: Any) -> Any:
    """`t` on `device` with the given strides where they describe a layout of its shape (a transposed output
    stays transposed, so the comparison sees what the candidate returned); else contiguous."""
    import torch
    if strides and list(strides) != list(t.stride()):
        try:
            out = torch.empty_strided(list(t.shape), [int(s) for s in strides], dtype=t.dtype, device=device)
            out.copy_(t)
            return out
        except RuntimeError:  # overlapping strides (an expanded view): keep the values, contiguous
            pass
    return t.to(device)


# ---------------------------------------------------------------------------------------------- control
def encode_args(value: Any, tensors: list[Any]) -> Any:
    """A JSON tree for nested tuples/lists of tensors and plain values; tensors go to `tensors`."""
    import torch
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"t": len(tensors) - 1}
    if isinstance(value, tuple):
        return {"tuple": [encode_args(v, tensors) for v in value]}
    if isinstance(value, list):
        return {"list": [encode_args(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    raise TypeError(f"cannot send a {type(value).__name__} to the runner")


def decode_args(tree: Any, tensors: list[Any]) -> Any:
    if isinstance(tree, dict):
        if "t" in tree:
            return tensors[int(tree["t"])]
        if "tuple" in tree:
            return tuple(decode_args(v, tensors) for v in tree["tuple"])
        if "list" in tree:
            return [decode_args(v, tensors) for v in tree["list"]]
        if "dtype" in tree:
            return dtype_of(tree["dtype"])
    return tree


class Channel:
    """Framed messages on a stream socket: u32 header length, JSON header, then the bytes of each tensor the
    header lists under "tensors" (contiguous, in order), except those it says are in the arena."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, header: dict[str, Any], tensors: Any = (), placed: list[int | None] | None = None) -> None:
        """`placed`: where the tensors already are in the arena's slot (Arena.place; None for one that is not):
        only their metas travel here. torch is imported only for a message with tensors: the judge's first
        message (the runner's setup) and the runner's first reply (its jail report) go out before either has
        loaded torch, so the two processes import it at once rather than one after the other."""
        blobs = []
        metas = []
        for j, t in enumerate(tensors):
            if placed is not None and placed[j] is not None:
                metas.append({**tensor_meta(t), "arena_offset": placed[j]})
                continue
            c = t.detach().contiguous().cpu()
            metas.append({**tensor_meta(t), "nbytes": c.numel() * c.element_size()})
            blobs.append(c)
        head = json.dumps({**header, "tensors": metas}).encode()
        self.sock.sendall(struct.pack("<I", len(head)) + head)
        if blobs:
            import torch
            for c in blobs:
                if c.numel():
                    self.sock.sendall(memoryview(c.reshape(-1).view(torch.uint8).numpy()))

    def recv(self, timeout: float | None = None, tensors: bool = True) -> tuple[dict[str, Any], list[bytearray]]:
        """One message's header, untyped (engine/pipeline/protocol/messages.py parses it), and its tensors' bytes.
        `tensors=False`: a message announcing tensor bytes is refused unread (the judge takes no bytes from its
        runner here, and a size the runner announces must not size the judge's buffers). MessageError: a whole
        frame whose header is no JSON object (the next frame can still be read)."""
        self.sock.settimeout(timeout)
        (n,) = struct.unpack("<I", self._exact(4))
        if n > MAX_HEADER:
            raise ChannelClosed(f"control header of {n} bytes")
        raw = self._exact(n)
        try:   # the frame was read whole, so the stream is still in step: a message that is none, not a cut
            header = json.loads(raw)
        except (ValueError, RecursionError) as exc:   # RecursionError: JSON nested past Python's stack
            raise MessageError(f"a control header that is not JSON ({type(exc).__name__})") from None
        if not isinstance(header, dict):
            raise MessageError(f"a control header that is not a JSON object but {type(header).__name__}")
        if not tensors:
            if header.get("tensors"):
                raise ChannelClosed("the runner announced tensor bytes on the control channel")
            return header, []
        blobs = [bytearray() if "arena_offset" in m else self._exact(int(m["nbytes"]))
                 for m in header.get("tensors", [])]
        return header, blobs

    def _exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ChannelClosed("the other side closed the control channel")
            got += k
        return buf


# ---------------------------------------------------------------------------------------------- records
@dataclass
class Record:
    type: int
    seq: int
    job: int
    body: dict[str, Any]
    received: float                    # the judge's monotonic clock when the record was complete
    payload: bytes | bytearray | None = None   # the output's bytes (None: in the arena's slot, `"arena": 1`)

    @property
    def name(self) -> str:
        return RECORD_NAMES.get(self.type, str(self.type))


def fingerprint_seed(key: bytes, seq: int, index: int) -> int:
    """The seed of the keyed fingerprint of output `index` in record `seq` (as the helper derives it)."""
    mac = hmac.new(key, f"fp:{seq}:{index}".encode(), hashlib.sha256).digest()
    return struct.unpack("<Q", mac[:8])[0]


@dataclass
class RecordReader:
    """Reads and verifies the helper's records from a binary stream (blocking). Raises Forgery on anything the
    helper cannot have written; ChannelClosed at the end of the stream."""

    stream: BinaryIO
    key: bytes
    next_seq: int = 0
    max_payload: int = 1 << 40
    seen: list[int] = field(default_factory=list)
    # the arena's slot, when the helper was given one (engine/pipeline/protocol/arena.py)
    arena_capacity: int | None = None

    def _exact(self, n: int) -> bytes:
        chunks = []
        left = n
        while left:
            b = self.stream.read(left)
            if not b:
                raise ChannelClosed("the record stream ended")
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def _exact_into(self, n: int) -> bytearray:
        """`n` bytes read straight into one buffer (an output's bytes, up to GBs: no joining of chunks)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.stream.readinto(view[got:])  # type: ignore[attr-defined]
            if not k:
                raise ChannelClosed("the record stream ended")
            got += k
        return buf

    def read(self) -> Record:
        head = self._exact(HEADER.size)
        magic, rtype, seq, job, body_len = HEADER.unpack(head)
        if magic != RECORD_MAGIC or body_len > MAX_BODY:
            raise Forgery(f"record stream garbage at record {self.next_seq} (magic {magic!r}, body {body_len} bytes)")
        body = self._exact(body_len)
        mac = self._exact(MAC_BYTES)
        if not hmac.compare_digest(mac, hmac.new(self.key, head + body, hashlib.sha256).digest()):
            raise Forgery(f"record {seq} ({RECORD_NAMES.get(rtype, rtype)}) carries a bad signature")
        if seq != self.next_seq:
            raise Forgery(f"record numbered {seq} where {self.next_seq} was due (a record was injected or dropped)")
        self.next_seq += 1
        try:
            parsed = json.loads(body)
        except ValueError as exc:
            raise Forgery(f"signed record {seq} has an unreadable body: {exc}") from exc
        rec = Record(rtype, seq, job, parsed, 0.0)
        if rtype == OUTPUT and parsed.get("kind") == "tensor":
            n = int(parsed.get("nbytes", 0))
            if n < 0 or n > self.max_payload:
                raise Forgery(f"record {seq} announces {n} payload bytes")
            if not parsed.get("arena"):
                rec.payload = self._exact_into(n)
            elif self.arena_capacity is None or n > self.arena_capacity:
                raise Forgery(f"record {seq} puts {n} bytes in an arena slot that cannot hold them")
            # else: the bytes wait in the slot; the judge's decoder takes them, in order, on its own thread
        rec.received = time.monotonic()
        return rec
