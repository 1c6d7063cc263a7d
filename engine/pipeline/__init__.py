"""Evaluation: the trusted judge, the jailed runner and the verdicts (INTEGRITY.md; docs/formats.md, "Evaluation").

A module's folder says which process runs it, the one thing a reader of a trust boundary must know:

- directly here: kbench's own process (the CLI, the app, an executor's worker): `evaluate` runs the static gate,
  the build and a judge, and turns the judge's result into verdicts and a report;
- `judge/`: the judge process (`python -m engine.pipeline.judge`), trusted, never running candidate code;
- `runner/`: the processes that run candidate code, jailed before it loads (`python -m engine.pipeline.runner`,
  one per candidate; the profile child);
- `keeper/`: the keeper of a kept judge (`python -m engine.pipeline.keeper`), a detached kbench process that holds
  one standby judge between `kbench eval` commands (kept_judge.py is its client);
- `protocol/`: what crosses between them (the request and result files, the control messages and their wire
  format, the shared-memory arena, the timing helper's one call): imports neither side;
- `timer/`: kbench's compiled timing helper, which both the judge and the runner load.

The judge never imports runner code and the runner never imports the judge's (import-linter contracts in
pyproject.toml). Layers: `engine.pipeline` uses `engine.harness` primitives (build, compare, runtimes, roofline),
`engine.integrity` and `engine.profile`; nothing below imports it. This package's __init__ and its folders'
import nothing, so the runner can import its modules and jail itself before torch is loaded.
"""
