"""Typed configuration, layered: defaults <- user file <- workspace file <- environment <- flags (load.py). The
sections as typed dataclasses (sections.py) and their checks (checks.py), the LLM price table (prices.py) and the
registry of every KBENCH_* environment variable (env.py). Imports nothing itself: `import engine.config.env` loads
neither pydantic nor the loader."""
