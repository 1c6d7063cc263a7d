"""The Ray executor: evaluations on a Ray cluster behind the local pipeline's `Evaluator` protocol (executor.py), its
start-up (cluster.py), what runs on the nodes (tasks.py), what crosses to them (envelopes.py) and one evaluation's way
through the tasks (jobs.py). Imports nothing itself, so importing engine.evolve never imports ray."""
