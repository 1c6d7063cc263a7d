"""The processes that run candidate code, each jailed (engine/jail) before torch or the candidate loads: the runner
(`python -m engine.pipeline.runner`, main.py), one fresh process per candidate, and the profile child
(profile_child.py), run under the profilers. Untrusted by design: the judge takes nothing they say as a result.
Imports nothing from engine/pipeline/judge/; this __init__ imports nothing at all."""
