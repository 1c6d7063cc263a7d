"""The shared arena between judge and runner (engine/pipeline/protocol/arena.py), on the CPU: sealing, the slot's
placement of arguments, taking a payload and releasing the slot, and the record reader's rules for payloads
that claim to be in the arena. The helper's side (binding.cpp) runs in the GPU tests."""

from __future__ import annotations

import io
import mmap
import os
import socket

import pytest
import torch

from engine.pipeline.protocol import wire
from engine.pipeline.protocol.arena import CONTROL, DATA_OFFSET, Arena
from tests.signed_records import signed_record


@pytest.fixture
def arena():
    a = Arena(size=DATA_OFFSET + (1 << 20))
    yield a
    a.close()


def _runner_view(a: Arena) -> mmap.mmap:
    """The arena as the runner maps it: through the inherited descriptor."""
    return mmap.mmap(a.fd, a.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def test_the_runner_cannot_resize_the_arena(arena):
    # a shrink would make the judge's next read of the slot a SIGBUS; a grow would eat memory
    for size in (DATA_OFFSET, arena.size * 2):
        with pytest.raises(PermissionError):
            os.ftruncate(arena.fd, size)
    assert os.fstat(arena.fd).st_size == arena.size


def test_place_puts_each_tensor_at_an_aligned_offset_and_refuses_what_does_not_fit(arena):
    a = torch.arange(10, dtype=torch.float32)
    b = torch.arange(7, dtype=torch.int64).reshape(7, 1).t()   # not contiguous: placed contiguous
    offsets = arena.place([a, b])
    assert offsets == [0, 64]
    view = _runner_view(arena)
    got_a = torch.frombuffer(view, dtype=torch.float32, offset=DATA_OFFSET, count=10).clone()
    got_b = torch.frombuffer(view, dtype=torch.int64, offset=DATA_OFFSET + 64, count=7).clone()
    view.close()
    assert torch.equal(got_a, a) and torch.equal(got_b, b.reshape(-1))
    too_big = torch.zeros(arena.capacity // 4 + 1, dtype=torch.float32)
    assert arena.place([too_big]) is None


def test_a_config_larger_than_the_slot_sends_what_fits_through_it_and_the_rest_through_the_socket(arena):
    """A config over the slot's size (KernelBench level 1's 4 GiB inputs, two variants) still moves most of its
    bytes through the arena: each tensor that fits, in order; the others travel on the socket, framed as before."""
    big = torch.zeros(arena.capacity // 4, dtype=torch.float32)    # the whole slot: not beside another
    small, other = torch.arange(5, dtype=torch.int64), torch.full((30,), 2.0)
    offsets = arena.place([small, big, other])
    assert offsets is not None and offsets[0] == 0 and offsets[1] is None and offsets[2] == 64
    left, right = socket.socketpair()
    try:
        wire.Channel(left).send({"type": "config"}, [small, torch.ones(3), other], offsets)
        header, blobs = wire.Channel(right).recv(timeout=5)
        assert ["arena_offset" in m for m in header["tensors"]] == [True, False, True]
        assert blobs[0] == bytearray() and bytes(blobs[1]) == torch.ones(3).numpy().tobytes() and blobs[2] == b""
    finally:
        left.close()
        right.close()
    view = _runner_view(arena)
    got = torch.frombuffer(view, dtype=torch.float32, offset=DATA_OFFSET + 64, count=30).clone()
    view.close()
    assert torch.equal(got, other)


def test_take_copies_the_slot_then_releases_it_to_the_helper(arena):
    view = _runner_view(arena)
    payload = os.urandom(1000)
    view[DATA_OFFSET:DATA_OFFSET + len(payload)] = payload          # what the helper writes
    assert CONTROL.unpack_from(view, 0)[0] == 0
    got = arena.take(len(payload), device="cpu")
    assert bytes(got.numpy()) == payload
    assert CONTROL.unpack_from(view, 0)[0] == 1                    # the helper may write the next one
    view[DATA_OFFSET:DATA_OFFSET + 4] = b"XXXX"                    # the runner scribbles afterwards:
    assert bytes(got[:4].numpy()) == payload[:4]                   # the judge's copy is its own
    arena.take(0, device="cpu")
    assert CONTROL.unpack_from(view, 0)[0] == 2
    view.close()
    with pytest.raises(ValueError):
        arena.take(arena.capacity + 1, device="cpu")



def test_record_reader_leaves_arena_payloads_in_a_slot_that_holds_them():
    key = os.urandom(32)
    out = {"kind": "tensor", "nbytes": 8, "i": 0, "k": 0, "arena": 1, "dtype": "Float", "shape": [2]}
    stream = signed_record(key, wire.OUTPUT, 0, 1, out)
    with pytest.raises(wire.Forgery, match="arena slot"):          # no arena was given to this helper
        wire.RecordReader(io.BytesIO(stream), key).read()
    a = Arena(size=DATA_OFFSET + 4096)
    try:
        view = _runner_view(a)
        view[DATA_OFFSET:DATA_OFFSET + 8] = torch.tensor([1.5, -2.0]).numpy().tobytes()
        # the payload is not in the stream: the next record follows the header directly
        two = stream + signed_record(key, wire.JOB_END, 1, 1, {"status": "ok"})
        reader = wire.RecordReader(io.BytesIO(two), key, arena_capacity=a.capacity)
        rec = reader.read()
        assert rec.payload is None and CONTROL.unpack_from(view, 0)[0] == 0   # the reader takes nothing
        assert reader.read().type == wire.JOB_END
        # the judge's decoder takes it, on its own thread, in record order
        assert torch.equal(wire.device_tensor(rec.body, a.take(8, device="cpu")), torch.tensor([1.5, -2.0]))
        assert CONTROL.unpack_from(view, 0)[0] == 1
        big = {**out, "nbytes": a.capacity + 8}
        with pytest.raises(wire.Forgery, match="arena slot"):
            stream = io.BytesIO(signed_record(key, wire.OUTPUT, 0, 1, big))
            wire.RecordReader(stream, key, arena_capacity=a.capacity).read()
        view.close()
    finally:
        a.close()
    with pytest.raises(ValueError, match="closed"):   # nothing copies from an unmapped slot
        a.take(8, device="cpu")


def test_device_tensor_refuses_bytes_that_do_not_make_the_announced_tensor():
    with pytest.raises(wire.Forgery):
        wire.device_tensor({"dtype": "Float", "shape": [3]}, torch.zeros(8, dtype=torch.uint8))


def test_a_config_message_names_placed_tensors_instead_of_carrying_them(arena):
    left, right = socket.socketpair()
    try:
        ts = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.ones(4, dtype=torch.int32)]
        offsets = arena.place(ts)
        wire.Channel(left).send({"type": "config"}, ts, offsets)
        wire.Channel(left).send({"type": "ping"})                  # framing intact after it
        header, blobs = wire.Channel(right).recv(timeout=5)
        assert [m["arena_offset"] for m in header["tensors"]] == offsets
        assert [m["nbytes"] for m in header["tensors"]] == [24, 16]
        assert blobs == [bytearray(), bytearray()]
        assert wire.Channel(right).recv(timeout=5)[0]["type"] == "ping"
        # where the judge takes no bytes (the runner's replies), a message announcing some is refused unread
        wire.Channel(left).send({"type": "configured"}, ts)
        with pytest.raises(wire.ChannelClosed, match="tensor bytes"):
            wire.Channel(right).recv(timeout=5, tensors=False)
    finally:
        left.close()
        right.close()
