"""KernelBench `ModelNew` candidates at build time: the jailed compile child (compile.py, its request and result in
child_types.py), the sources a file compiles with load_inline (sources.py), kbench's faster build of them (fast.py,
includes.py) and carrying the builds to the runner (prebuilt.py). Imports nothing itself."""
