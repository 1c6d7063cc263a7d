"""Integrity checks against reward hacks: static rules over syntax trees (static.py, the entry points; cpp_scan.py
for C++/CUDA via tree-sitter, with its rule families in cpp_rules_*.py over cpp_tree.py, cpp_context.py and
cpp_vocab.py; py_scan.py for ModelNew files; findings.py, the rule ids and statuses; policy.py,
the pure/engineering library policy) and the task filter for degenerate configs and vacuous tolerances
(check_task.py). What the trusted judge checks while it watches a candidate run is in
engine/pipeline/judge/analysis.py; the jail is engine/jail.

See INTEGRITY.md for the catalog of hacks, their fixtures, how each one is detected, and what each static
rule could misfire on.
"""
