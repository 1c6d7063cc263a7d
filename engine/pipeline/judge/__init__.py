"""The judge process (`python -m engine.pipeline.judge`): trusted, never runs candidate code. It prepares each
config's inputs and references itself, drives one jailed runner (runner_link.py, runner_process.py), reads the
timing helper's signed records and compares what the candidate returned (analysis.py, digest.py), times the
candidate and the baselines (timing_phase.py, timing.py) and writes its result (engine/pipeline/protocol/result.py).
Imports nothing from engine/pipeline/runner/."""
