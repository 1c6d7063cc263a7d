"""Kernel-only candidates meet their task: a direction's signature as the launcher ABI (abi.py), the texts and the
glue generated from it (text.py, generated.py, `materialise`), and its Triton form (triton.py). Imports
nothing itself."""
