"""Integrity checks against reward hacks: static source scans (static.py) and the task filter for degenerate
configs (check_task.py). What the trusted judge checks while it watches a candidate run is in
engine/pipeline/analysis.py; the jail is engine/jail.

See INTEGRITY.md for the catalog of hacks, their fixtures and how each one is detected.
"""
