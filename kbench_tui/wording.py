"""The engine's words, as the app says them. The engine writes for the command line: its events start with
`[session]`, its errors advise flags (`--force`, `--take-over`) and "the same command", and its note events
carry data keyed for machines (`executor=LocalPipelineExecutor`). Here they become what a person reading the
app can act on: what the app offers instead of a flag, short candidate ids, plain words for class names."""

from __future__ import annotations

import re
from typing import Any

# CLI advice -> what the app offers. Most specific first; each is a regular expression over the message.
_ADVICE: tuple[tuple[str, str], ...] = (
    (r"([Oo])r pass --force to export it anyway", r"\1r tick 'force' to export it anyway"),
    (r"Wait for it to end, or, if you are sure it is gone, run again with --take-over\.",
     "Wait for it to end (or stop it there), then try again: the app never takes a session over from another "
     "process."),
    (r"run the same command later", "resume the session later (space, or R once it has stopped)"),
    (r"run the same command on a machine with a GPU to measure them and go on",
     "open this workspace on a machine with a GPU and resume the session there (R) to measure them and go on"),
    (r"\(measured by the same command on a GPU machine\)",
     "(measured when the session runs again on a machine with a GPU)"),
    (r"fix it and run the same command to resume", "fix it and resume the session (R)"),
    (r"run the same command again \(nothing was written\)", "try again (nothing was written)"),
    (r"run the same command with --reevaluate-damaged to go on without this one's",
     "`kbench evolve SESSION --reevaluate-damaged` in a shell goes on without this one's"),
    (r"resume with the same command", "resume the session (R)"),
    (r"run the same command", "resume the session (R)"),
    (r"\(use --force\)", "(choose an empty folder)"),
)
_ADVICE_RE = tuple((re.compile(p), r) for p, r in _ADVICE)

# evaluator and executor classes -> the word the README uses for them ([executor] kind)
_EXECUTORS = {"LocalPipelineExecutor": "local", "RayExecutor": "ray", "RayPipelineExecutor": "ray",
              "PipelineEvaluator": "local"}


def for_the_app(text: str) -> str:
    """An engine message with its command-line advice replaced by what the app offers."""
    for pattern, repl in _ADVICE_RE:
        text = pattern.sub(repl, text)
    return text


def session_line(line: str, session: str) -> str:
    """An event's line in its own session's screen: no `[session]` prefix, the session's ids short."""
    prefix = f"[{session}] "
    if line.startswith(prefix):
        line = line[len(prefix):]
    return for_the_app(line.replace(f"{session}-g", "g"))


def status_phrase(line: str, session: str, width: int = 70) -> str:
    """The latest event for the status line: its words, cut to `width`."""
    text = session_line(line, session)
    return text if len(text) <= width else text[: width - 1] + "…"


def _value(key: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if key in ("executor", "evaluator"):
        return _EXECUTORS.get(str(value), str(value))
    return str(value)


_EVENT_WORDS = {"evaluated": "evaluated", "reevaluated": "re-evaluated", "waiting_for_gpu": "waiting for a GPU",
                "infrastructure_failure": "not judged (infrastructure failure)", "exported": "exported",
                "directives": "new directives"}


def event_text(event: str, data: dict[str, Any]) -> str:
    """A note event (engine.workspace Event) in words: `waiting for a GPU: no CUDA GPU is visible to the
    evaluator (local executor, 1 attempt)` rather than `waiting_for_gpu reason=... executor=LocalPipelineExecutor`."""
    data = {k: v for k, v in (data or {}).items() if v is not None}
    head = _EVENT_WORDS.get(event, event.replace("_", " "))
    reason = data.pop("reason", None)
    parts = []
    if "speedup" in data:
        parts.append(f"{float(data.pop('speedup')):.3f}x")
    for key in ("executor", "evaluator"):
        if key in data:
            parts.append(f"{_value(key, data.pop(key))} {key}")
    if "attempts" in data:
        n = data.pop("attempts")
        parts.append(f"{n} attempt{'s' if n != 1 else ''}")
    parts += [f"{k.replace('_', ' ')} {_value(k, v)}" for k, v in data.items()]
    text = head + (f": {for_the_app(str(reason))}" if reason else "")
    return text + (f" ({', '.join(parts)})" if parts else "")
