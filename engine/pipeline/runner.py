"""The runner: `python -m engine.pipeline.runner CONTROL_FD KEY_FD RECORD_FD [ARENA_FD]`, one fresh process per
candidate.

Untrusted by design: it loads the candidate and calls it on the arguments the judge sends, through the compiled
timing helper, and nothing else. It jails itself first (engine.jail: Landlock, network namespace, seccomp,
no privileges, dies with the judge), while it is still a single thread and before torch or the candidate is
imported; then it imports torch, loads the helper from its read-only folder and hands it the descriptors
(the helper reads the signing key and closes it, and maps the arena, engine/pipeline/arena.py). Only then does
candidate code run. What the runner says on the control channel is never taken as a result: results are the
helper's signed records, and the judge checks them against references it computed itself.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from engine import jail
from engine.jail import privileges
from engine.pipeline.arena import DATA_OFFSET as ARENA_DATA_OFFSET, REGISTER_STEP as ARENA_REGISTER_STEP
from engine.pipeline.wire import Channel, ChannelClosed, decode_args, device_tensor, restride, tensor_from_bytes


class Runner:
    def __init__(self, ctl: Channel, key_fd: int, record_fd: int, arena_fd: int = -1):
        self.ctl = ctl
        self.key_fd, self.record_fd, self.arena_fd = key_fd, record_fd, arena_fd
        self.timer: Any = None
        self.module: Any = None
        self.configs: dict[str, dict[str, Any]] = {}

    # -- start ------------------------------------------------------------------------------------------
    def start(self) -> None:
        header, _ = self.ctl.recv()
        report = jail.apply(jail.JailSpec.from_json(header["jail"]))
        self.ctl.send({"type": "jailed", "report": report.to_json()})
        import torch

        from engine.harness.build import load_extension

        if not torch.cuda.is_available():
            # Nothing can be measured; the key is dropped unread (closing the pipe discards it). The runner
            # still answers `load` and `ping`, so a machine without a GPU can show what a candidate's import
            # does in the jail (the CPU tests do).
            os.close(self.key_fd)
            if self.arena_fd >= 0:
                os.close(self.arena_fd)
            self.ctl.send({"type": "no_gpu"})
            return
        torch.cuda.init()
        self.timer = load_extension(Path(header["timer_so"]), header["timer_module"])
        slot = os.fstat(self.arena_fd).st_size - ARENA_DATA_OFFSET if self.arena_fd >= 0 else 0
        self.timer.init(self.key_fd, self.record_fd, self.arena_fd, ARENA_DATA_OFFSET, ARENA_REGISTER_STEP)
        if header.get("pin_arena") and slot > 0:   # page-lock the slot now, not during the first config
            self.timer.arena_view(slot)
        self.ctl.send({"type": "ready", "device": {"gpu": torch.cuda.get_device_name()}, "pid": os.getpid()})

    # -- messages -----------------------------------------------------------------------------------------
    def serve(self) -> None:
        handlers: dict[str, Callable[[dict[str, Any], list[bytearray]], dict[str, Any]]] = {
            "load": self.load, "config": self.configure, "job": self.job, "drop": self.drop,
            "ping": lambda h, b: {"type": "pong"}}
        while True:
            header, blobs = self.ctl.recv()
            kind = header.get("type")
            if kind == "exit":
                return
            handler = handlers.get(str(kind))
            if handler is None:
                self.ctl.send({"type": "error", "message": f"unknown message {kind!r}"})
                continue
            try:
                reply = handler(header, blobs)
            except Exception as exc:  # noqa: BLE001 - candidate code raised; the judge decides what it means
                reply = {"type": "error", "message": f"{type(exc).__name__}: {str(exc).strip()[:2000]}",
                         "trace": traceback.format_exc(limit=8)[-3000:]}
            self.ctl.send(reply)
            if reply.get("fatal"):
                return

    def load(self, h: dict[str, Any], _: list[bytearray]) -> dict[str, Any]:
        self.module = load_candidate(h)
        entry = h.get("entry")
        if entry and not hasattr(self.module, entry):
            return {"type": "error", "message": f"the candidate's module exports no `{entry}`"}
        return {"type": "loaded"}

    def configure(self, h: dict[str, Any], blobs: list[bytearray]) -> dict[str, Any]:
        import torch
        metas = h["tensors"]
        tensors = [self._from_arena(m) if "arena_offset" in m else tensor_from_bytes(m, b, "cuda")
                   for m, b in zip(metas, blobs)]
        k, n = int(h["variants"]), int(h["per_variant"])
        variants = [tensors[v * n:(v + 1) * n] for v in range(k)]
        live = [t.clone() for t in variants[0]]  # fresh storage with variant 0's strides, refilled per call
        args = decode_args(h["args"], live)
        if h["kind"] == "modelnew":
            call = self._modelnew_call(h, tensors[k * n:], args)
        else:
            fn = getattr(self.module, h["entry"])

            def call() -> Any:
                with torch.no_grad():
                    return fn(*args)
        self.configs[h["cid"]] = {"live": live, "variants": variants, "call": call}
        return {"type": "configured", "cid": h["cid"]}

    def _from_arena(self, meta: dict[str, Any]) -> Any:
        """An argument the judge placed in the arena's slot, copied to the GPU (page-locked: full speed)."""
        import torch
        off, n = int(meta["arena_offset"]), int(meta["nbytes"])
        flat = torch.empty(n, dtype=torch.uint8, device="cuda")
        if n:
            flat.copy_(self.timer.arena_view(off + n)[off:])
        return restride(device_tensor(meta, flat), meta.get("strides"), "cuda")

    def _modelnew_call(self, h: dict[str, Any], state_tensors: list[Any], args: Any) -> Callable[[], Any]:
        import torch
        model_h = h["model"]
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

    def job(self, h: dict[str, Any], _: list[bytearray]) -> dict[str, Any]:
        import torch

        from engine.harness.poison import poison_free_cache
        if self.timer is None:
            return {"type": "error", "message": "no GPU: nothing can be timed here"}
        cfg = self.configs[h["cid"]]
        poison_free_cache()
        status = self.timer.run(
            int(h["job"]), h["mode"], cfg["call"], cfg["live"], cfg["variants"], [int(s) for s in h.get("schedule", [])],
            int(h.get("warmup", 0)), int(h.get("min_iters", 1)), int(h.get("max_iters", 1)),
            float(h.get("budget_s", 0.0)), int(h.get("checks", 0)), bool(h.get("flush", True)),
            bool(h.get("probe_inputs", False)), float(h.get("settle_ms", -1.0)))
        try:
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a sticky CUDA error: this process can do nothing more
            return {"type": "job_done", "job": h["job"], "status": status, "fatal": True,
                    "message": f"CUDA error: {str(exc).strip().splitlines()[0]}"}
        return {"type": "job_done", "job": h["job"], "status": status}

    def drop(self, h: dict[str, Any], _: list[bytearray]) -> dict[str, Any]:
        import torch
        self.configs.pop(h["cid"], None)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()   # back to the GPU, which other evaluations may share
        return {"type": "dropped"}


def load_candidate(load: dict[str, Any]) -> Any:
    """Import the candidate named by a `load` message (engine.pipeline.runner_process.stage_candidate)."""
    from engine.harness.build import load_extension
    from engine.harness.runtimes.base import import_file
    if load.get("py_path"):
        ext_root = os.environ.get("TORCH_EXTENSIONS_DIR")
        if ext_root:  # the compile stage's load_inline builds, staged into scratch: imported, not built again
            from engine.harness.kernelbench_prebuilt import seed_versions
            seed_versions(ext_root)
        return import_file(Path(load["py_path"]), load["module_name"])
    return load_extension(Path(load["so_path"]), load["module_name"])


def main(argv: list[str]) -> int:
    import faulthandler
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
            ctl.send({"type": "error", "fatal": True, "message": f"runner: {type(exc).__name__}: {exc}",
                      "trace": traceback.format_exc(limit=8)[-3000:]})
        except OSError:
            pass
        return 1
    return 0


if __name__ == "__main__":
    # the judge waits for this process to be gone before it times the baselines
    privileges.exit_without_teardown(main(sys.argv[1:]))
