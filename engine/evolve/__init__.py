"""Evolution: populations, operators, the pipelined evaluator and the resumable loop.

    events.py      typed events the loop emits
    population.py  members, fitness, selection with diversity
    operators.py   which operator fills a slot; defaults per proposer
    outcome.py     the Evaluator protocol the loop speaks, EvalOutcome (what an evaluation hands back)
    worker_fns.py  what the evaluators' workers run: build, check + time, profile; visible_gpus
    local_executor.py  LocalPipelineExecutor: CPU compile pool + one worker per GPU, pipelined
    ray/           RayExecutor: the same on a Ray cluster (executor, cluster, envelopes, jobs, tasks)
    factory.py     make_evaluator: the local or the Ray executor, from the config
    resume.py      the population and progress rebuilt from the workspace
    search_state.py  the search's state saved with each commit, so a resume proposes what a run would have
    loop.py        EvolutionSession: the run, the inbox, its stop conditions. It owns its parts, each with its
                   own state: controls.py (a UI's controls, the inbox, how the run ends, the pool),
                   evaluations.py (what the evaluator works on), recorder.py (events and notes), gate.py (before
                   the GPU: dedup, static and LLM checks), proposing.py (slot to proposal to commit); planner.py
                   decides which operator and parents fill a slot (pure)

Import each name from its module: this package re-exports nothing.
"""
