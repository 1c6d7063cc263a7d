"""Records as the timing helper writes them (engine/pipeline/protocol/wire.py's format), for tests of the reader."""

from __future__ import annotations

import hashlib
import hmac
import json

from engine.pipeline.protocol import wire


def signed_record(key: bytes, rtype: int, seq: int, job: int, body: dict, payload: bytes = b"") -> bytes:
    b = json.dumps(body).encode()
    head = wire.HEADER.pack(wire.RECORD_MAGIC, rtype, seq, job, len(b))
    return head + b + hmac.new(key, head + b, hashlib.sha256).digest() + payload
