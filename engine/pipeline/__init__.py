"""Evaluation: the trusted judge, the jailed runner and the verdicts (INTEGRITY.md; docs/formats.md, "Evaluation").

Layers: `engine.pipeline` (this floor) uses `engine.harness` primitives (build, compare, runtimes, roofline),
`engine.integrity` and `engine.profile`; nothing below imports it. This package's __init__ imports nothing,
so the runner can import its modules and jail itself before torch is loaded.
"""
