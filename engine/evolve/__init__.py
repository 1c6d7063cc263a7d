"""Evolution: populations, operators, the pipelined evaluator and the resumable loop.

    events.py      typed events the loop emits
    population.py  members, fitness, selection with diversity
    operators.py   which operator fills a slot; defaults per proposer
    executor.py    index of the evaluators: outcome.py (Evaluator protocol, EvalOutcome), worker_fns.py,
                   local_executor.py (CPU compile pool + one worker per GPU), ray_executor.py, fake.py
    resume.py      the population and progress rebuilt from the workspace
    loop.py        EvolutionSession: the run and its stop conditions; its parts: controls.py (pause, stop,
                   threads, the inbox), planner.py (which operator and parents fill a slot: pure), proposing.py
                   (plan to proposal), gate.py (before the GPU: dedup, static and LLM checks), recorder.py
                   (events and workspace notes)
"""

from engine.evolve.events import EVENT_TYPES, EvolveEvent
from engine.evolve.fake import FakeEvaluator
from engine.evolve.local_executor import LocalPipelineExecutor
from engine.evolve.loop import Budgets, EvolutionSession
from engine.evolve.operators import OperatorPolicy, default_policy, parse_weights
from engine.evolve.outcome import EvalOutcome, Evaluator
from engine.evolve.population import Member, Population, fitness
from engine.evolve.worker_fns import visible_gpus

__all__ = [
           "EVENT_TYPES",
           "Budgets",
           "EvalOutcome",
           "Evaluator",
           "EvolutionSession",
           "EvolveEvent",
           "FakeEvaluator",
           "LocalPipelineExecutor",
           "Member",
           "OperatorPolicy",
           "Population",
           "default_policy",
           "fitness",
           "parse_weights",
           "visible_gpus",
]
