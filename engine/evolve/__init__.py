"""Evolution: populations, operators, the pipelined evaluator and the resumable loop.

    events.py      typed events the loop emits
    population.py  members, fitness, selection with diversity
    operators.py   which operator fills a slot; defaults per proposer
    outcome.py     the Evaluator protocol the loop speaks, EvalOutcome (what an evaluation hands back)
    worker_fns.py  what the evaluators' workers run: build, check + time, profile; visible_gpus
    local_executor.py  LocalPipelineExecutor: CPU compile pool + one worker per GPU, pipelined
    ray_executor.py    RayExecutor: the same on a Ray cluster (ray_tasks.py, ray_cluster.py, ray_jobs.py)
    factory.py     make_evaluator: the local or the Ray executor, from the config
    resume.py      the population and progress rebuilt from the workspace
    loop.py        EvolutionSession: the run and its stop conditions; its parts: controls.py (pause, stop,
                   threads, the inbox), planner.py (which operator and parents fill a slot: pure), proposing.py
                   (plan to proposal), gate.py (before the GPU: dedup, static and LLM checks), recorder.py
                   (events and workspace notes)

Import each name from its module: this package re-exports nothing.
"""
