"""Test doubles: stand-ins for the parts of kbench that need a compiler, a GPU or a person, for the tests and
the benchmark scripts' CPU dry runs.

    evaluator.py      FakeEvaluator and the fake build / GPU / profile stages: results from the source text
    faults.py         the executors' fault tests' stages: record the worker, hold an attempt to be killed
    kbench.py         `python -m tests.doubles.kbench ARGS`: kbench's command line on the fake evaluator
    timing_helper.py  the compiled timing helper's call protocol on CPU tensors, for the judge's analysis
    tui.py            the app's test helpers: a small workspace, the screen as text, a fake-backed Backend

The stand-in servers of the LLM APIs are in tests/standins/. The product never imports this package: the
`production-without-test-doubles` import-linter contract (pyproject.toml) forbids engine and kbench_tui to
import `tests`, and the wheel holds only engine* and kbench_tui*.
"""
