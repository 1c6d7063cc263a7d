"""Integrity checks against reward hacks: static rules over syntax trees (static.py, the entry points; cpp_scan.py
for C++/CUDA via tree-sitter; py_scan.py for ModelNew files; findings.py, the rule ids and statuses; policy.py,
the pure/engineering library policy), dynamic checks run in the sandboxed child (dynamic.py), and the task
filter for degenerate configs and vacuous tolerances (check_task.py).

See INTEGRITY.md for the catalog of hacks, their fixtures, how each one is detected, and what each static
rule could misfire on.
"""
