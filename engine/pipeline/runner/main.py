"""The runner: `python -m engine.pipeline.runner CONTROL_FD KEY_FD RECORD_FD [ARENA_FD]`, one fresh process per
candidate.

Untrusted by design: it loads the candidate and calls it on the arguments the judge sends, through the compiled
timing helper, and nothing else. It jails itself first (engine.jail: Landlock, network namespace, seccomp,
no privileges, dies with the judge), while it is still a single thread and before torch or the candidate is
imported; then it imports torch, takes the judge's numeric settings (engine/harness/numerics.py), loads the
helper from its read-only folder and hands it the descriptors (the helper reads the signing key and closes it,
and maps the arena, engine/pipeline/protocol/arena.py). Only then does candidate code run. What the runner says on
the control channel is never taken as a result: results are the helper's signed records, and the judge checks them
against references it computed itself. Its messages are the typed ones of engine/pipeline/protocol/messages.py.

Lazy imports: torch and the harness (build, numerics, runtimes, poison, kernelbench_prebuilt, kernelbench_includes,
triton_load) are imported inside the functions that need them: they may load only once the runner has jailed itself,
and before its jail it imports little (the jail, the wire format and the messages, all of them free of torch).
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import engine.pipeline.protocol.messages as msg
from engine import jail
from engine.jail import privileges
from engine.pipeline.protocol.arena import DATA_OFFSET as ARENA_DATA_OFFSET
from engine.pipeline.protocol.arena import PIN_UP_FRONT as ARENA_PIN_UP_FRONT
from engine.pipeline.protocol.arena import REGISTER_STEP as ARENA_REGISTER_STEP
from engine.pipeline.protocol.wire import (Channel, ChannelClosed, decode_args, device_tensor, restride,
                                           tensor_from_bytes)


@dataclass
class _Configured:
    live: list[Any]                # fresh storage with variant 0's strides, refilled per call
    variants: list[list[Any]]      # each variant's argument tensors
    call: Callable[[], Any]
    fresh_modes: list[int]         # per tensor: how each call's values are drawn from its variant's (helper)
    fresh_alphas: list[float]
    mutable: list[int]             # tensors the reference mutates in place (msg.Config.mutable_inputs)
    held: int = 0                  # GPU bytes its setup left allocated (its variants, live inputs, model)
    setup_peak: int = 0            # its setup's peak allocation above what was allocated before it


class Runner:
    def __init__(self, ctl: Channel, key_fd: int, record_fd: int, arena_fd: int = -1):
        self.ctl = ctl
        self.key_fd, self.record_fd, self.arena_fd = key_fd, record_fd, arena_fd
        self.timer: Any = None
        self.module: Any = None
        self.configs: dict[str, _Configured] = {}

    def send(self, reply: msg.Reply) -> None:
        self.ctl.send(reply.to_wire())

    # -- start ------------------------------------------------------------------------------------------
    def start(self) -> None:
        header, _ = self.ctl.recv()
        setup = msg.parse_as(header, msg.Setup)
        report = jail.apply(jail.JailSpec.from_json(setup.jail))
        self.send(msg.Jailed(report=report.to_json()))
        import torch

        from engine.harness.build.stage import load_extension
        from engine.harness.numerics import JUDGE, Numerics, apply

        # the judge's settings before any candidate code: its references and the candidate's library calls
        # (cuDNN, cuBLAS) start from the same precision; what the candidate sets later is its own doing
        apply(Numerics.from_json(setup.numerics) if setup.numerics is not None else JUDGE)

        if not torch.cuda.is_available():
            # Nothing can be measured; the key is dropped unread (closing the pipe discards it). The runner
            # still answers `load` and `ping`, so a machine without a GPU can show what a candidate's import
            # does in the jail (the CPU tests do).
            os.close(self.key_fd)
            if self.arena_fd >= 0:
                os.close(self.arena_fd)
            self.send(msg.NoGpu())
            return
        torch.cuda.init()
        self.timer = load_extension(Path(setup.timer_so), setup.timer_module)
        slot = os.fstat(self.arena_fd).st_size - ARENA_DATA_OFFSET if self.arena_fd >= 0 else 0
        self.timer.init(self.key_fd, self.record_fd, self.arena_fd, ARENA_DATA_OFFSET, ARENA_REGISTER_STEP)
        if setup.pin_arena and slot > 0:   # page-lock the slot now (as far as most payloads reach), not in a config
            self.timer.arena_view(min(slot, ARENA_PIN_UP_FRONT))
        self.send(msg.Ready(device={"gpu": torch.cuda.get_device_name()}, pid=os.getpid()))

    # -- messages -----------------------------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            try:
                header, blobs = self.ctl.recv()
                request = msg.parse_request(header)
            except msg.MessageError as exc:   # the judge's bug, not the candidate's: say so and go on
                self.send(msg.Error(message=f"runner: {exc}"))
                continue
            if isinstance(request, msg.Exit):
                return
            try:
                reply = self._handle(request, blobs)
            except Exception as exc:  # noqa: BLE001 - candidate code raised; the judge decides what it means
                reply = msg.Error(message=f"{type(exc).__name__}: {str(exc).strip()[:2000]}",
                                  trace=traceback.format_exc(limit=8)[-3000:])
            self.send(reply)
            if msg.fatal_reason(reply) is not None:
                return

    def _handle(self, request: msg.Request, blobs: list[bytearray]) -> msg.Reply:
        if isinstance(request, msg.Load):
            return self.load(request)
        if isinstance(request, msg.Config):
            return self.configure(request, blobs)
        if isinstance(request, msg.Job):
            return self.job(request)
        if isinstance(request, msg.Drop):
            return self.drop(request)
        if isinstance(request, msg.Ping):
            return msg.Pong()
        return msg.Error(message=f"runner: an unexpected `{request.KIND}` request")

    def load(self, m: msg.Load) -> msg.Reply:
        if m.numerics is not None:
            # lazy, as in start(): the settings module is read before the jail, torch after it
            from engine.harness.numerics import Numerics, apply
            apply(Numerics.from_json(m.numerics))
        self.module = load_candidate(m)
        if m.entry and not hasattr(self.module, m.entry):
            return msg.Error(message=f"the candidate's module exports no `{m.entry}`")
        return msg.Loaded()

    def configure(self, m: msg.Config, blobs: list[bytearray]) -> msg.Reply:
        import torch
        before = torch.cuda.memory_allocated()   # the configs kept for timing, and this process's own buffers
        torch.cuda.reset_peak_memory_stats()     # JobDone.peak_bytes: this config's setup and jobs
        tensors = [self._from_arena(meta) if "arena_offset" in meta else tensor_from_bytes(meta, b, "cuda")
                   for meta, b in zip(m.tensors, blobs)]
        k, n = m.variants, m.per_variant
        variants = [tensors[v * n:(v + 1) * n] for v in range(k)]
        live = [t.clone() for t in variants[0]]
        args = decode_args(m.args, live)
        if m.model is not None:   # kind "modelnew" (msg.Config checks that it comes with its model)
            call = self._modelnew_call(m.model, tensors[k * n:], args)
        else:
            fn = getattr(self.module, m.entry)

            def call() -> Any:
                with torch.no_grad():
                    return fn(*args)
        if m.call_seeds is not None:
            call = seeded_calls(call, m.call_seeds, self.timer.current_variant)
        self.configs[m.cid] = _Configured(live, variants, call, list(m.fresh_modes or ()), list(m.fresh_alphas or ()),
                                          list(m.mutable_inputs), held=max(torch.cuda.memory_allocated() - before, 0),
                                          setup_peak=max(torch.cuda.max_memory_allocated() - before, 0))
        return msg.Configured(cid=m.cid)

    def _from_arena(self, meta: dict[str, Any]) -> Any:
        """An argument the judge placed in the arena's slot, copied to the GPU (page-locked: full speed)."""
        import torch
        off, n = int(meta["arena_offset"]), int(meta["nbytes"])
        flat = torch.empty(n, dtype=torch.uint8, device="cuda")
        if n:
            flat.copy_(self.timer.arena_view(off + n)[off:])
        return restride(device_tensor(meta, flat), meta.get("strides"), "cuda")

    def _modelnew_call(self, model_h: dict[str, Any], state_tensors: list[Any], args: Any) -> Callable[[], Any]:
        import torch
        torch.manual_seed(int(model_h["seed"]))
        init = decode_args(model_h["init"], state_tensors)
        model = self.module.ModelNew(*init)
        own = model.state_dict()
        state = {name: state_tensors[i] for name, i in model_h["state"].items()}
        shared = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
        model.load_state_dict(shared, strict=False)
        dtype = getattr(torch, model_h["dtype"]) if model_h.get("dtype") else None
        model = model.to(device="cuda", dtype=dtype)

        def call() -> Any:
            with torch.no_grad():
                return model(*args)
        return call

    def job(self, m: msg.Job) -> msg.Reply:
        import torch

        from engine.harness.poison import poison_free_cache
        from engine.pipeline.protocol.helper_call import run_helper
        if self.timer is None:
            return msg.Error(message="no GPU: nothing can be timed here")
        cfg = self.configs[m.cid]
        # The figure the judge weighs against this config's footprint is this config's own: its setup, its held
        # tensors and its calls. The configs kept prepared for their timing beside it (within the judge's
        # KEEP_FOR_TIMING share of the GPU and KEEP_MAX_BYTES, whatever the problem) are reported apart (`kept_bytes`);
        # the
        # poisoning takes every free block the allocator keeps for a moment, memory this process holds already
        # (its reserved figure does not move), and is left out.
        kept = sum(c.held for cid, c in self.configs.items() if cid != m.cid)
        poison_free_cache()
        torch.cuda.reset_peak_memory_stats()
        status = run_helper(self.timer, m, cfg.call, cfg.live, cfg.variants, cfg.fresh_modes, cfg.fresh_alphas,
                            cfg.mutable)
        try:
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a sticky CUDA error: this process can do nothing more
            return msg.JobDone(job=m.job, status=str(status), fatal=True,
                               message=f"CUDA error: {str(exc).strip().splitlines()[0]}")
        own = max(cfg.setup_peak, torch.cuda.max_memory_allocated() - kept)
        return msg.JobDone(job=m.job, status=str(status), peak_bytes=int(own), kept_bytes=int(kept))

    def drop(self, m: msg.Drop) -> msg.Reply:
        import torch
        self.configs.pop(m.cid, None)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()   # back to the GPU, which other evaluations may share
        return msg.Dropped()


def seeded_calls(call: Callable[[], Any], seeds: tuple[int, ...], current_variant: Callable[[], int]
                 ) -> Callable[[], Any]:
    """`call` with torch's generators seeded before each call, with the seed of the variant the helper refilled
    the inputs from: the judge computed that variant's reference right after the same seeding (a reference that
    draws random numbers: configs.prepare)."""
    import torch

    def seeded_call() -> Any:
        torch.manual_seed(seeds[current_variant()])
        return call()
    return seeded_call


def load_candidate(load: msg.Load) -> Any:
    """Import the candidate named by a `load` message (engine.pipeline.judge.runner_process.stage_load)."""
    from engine.harness.build.stage import load_extension
    from engine.harness.runtimes.base import import_file
    if load.triton:
        from engine.harness.triton_load import load_triton
        return load_triton(Path(load.py_path or ""), load.module_name)
    if load.py_path:
        import torch.utils.cpp_extension as cpp

        from engine.harness.kernelbench.includes import add_include_path
        add_include_path(cpp)   # the include paths the compile stage's build had: torch's versioner hashes them
        ext_root = os.environ.get("TORCH_EXTENSIONS_DIR")
        if ext_root:  # the compile stage's load_inline builds, staged into scratch: imported, not built again
            from engine.harness.kernelbench.prebuilt import seed_versions
            seed_versions(ext_root)
        return import_file(Path(load.py_path), load.module_name)
    return load_extension(Path(load.so_path or ""), load.module_name)


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a crash in candidate code leaves its Python stack in runner.log, which the judge quotes
    ctl_fd, key_fd, record_fd = (int(a) for a in argv[:3])
    arena_fd = int(argv[3]) if len(argv) > 3 else -1
    ctl = Channel(socket.socket(fileno=ctl_fd))
    runner = Runner(ctl, key_fd, record_fd, arena_fd)
    try:
        runner.start()
        runner.serve()
    except ChannelClosed:
        return 0
    except Exception as exc:  # noqa: BLE001 - report why we stopped, if the judge still listens
        try:
            runner.send(msg.Error(message=f"runner: {type(exc).__name__}: {exc}", fatal=True,
                                  trace=traceback.format_exc(limit=8)[-3000:]))
        except OSError:
            pass
        return 1
    return 0

