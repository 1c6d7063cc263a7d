"""The compile stage and what it stands on: stage.py turns a candidate into an importable torch extension (native,
KernelBench or Triton: native.py, triton.py), through one jailed, bounded compiler step (steps.py), a cache keyed by
source and toolchain (cache.py, result.py, archive.py), the one-paragraph reading of a failure (diagnose.py) and
word of a long wait before it starts (wait.py). Imports nothing itself."""
