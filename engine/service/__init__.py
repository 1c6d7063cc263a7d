"""One session service for the CLI and the app: describe, start, resume and re-evaluate evolution sessions.

Both front ends hand a SessionSpec (what the user asked; None means "the default") to the same
SessionService, which resolves it once (SessionPlan: task, proposer, budgets, operators, verifiers, model)
and wires it the same way: one cost ledger shared by the proposer and the LLM verifiers, the static checks,
the LLM verifiers for LLM proposers, the session's config written to the workspace so a resume (from
either front end) rebuilds the same session. Defaults live here and nowhere else.

    spec.py             what a front end asks for and gets back: SessionSpec, SessionPlan, RunningSession,
                        DEFAULTS, SESSION_PROPOSERS
    session_service.py  SessionService: resolve a spec into a plan, start and resume sessions
    wiring.py           the parts a session is built from: the evaluator seam, the LLM client, proposer,
                        verifiers and target description
    reevaluation.py     evaluate candidates again and append what was found, as the session's one writer

Import each name from its module; this package re-exports nothing (engine.service is one layer of the
engine-layers contract in pyproject.toml).
"""
