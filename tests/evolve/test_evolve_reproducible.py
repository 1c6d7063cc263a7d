"""A seeded session is the same session however often it is killed: killed at random moments, or at every
write point in turn (the KBENCH_CRASHPOINT hooks), and resumed with the same command, it ends with exactly
the candidates of an uninterrupted run (same generations, numbers, sources and parents), each evaluated
once, and `kbench fsck` (git fsck included) finds nothing to say. CPU, the fake evaluator."""

from __future__ import annotations

import random
import signal
import sys
import time

import pytest

from engine.config.env import env_raw
from tests.kbench_procs import evaluated_counts, evolve_args, kbench_fsck_clean, run, shape, start

GENS, POP, SEED = 3, 4, 11


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ref") / "ws"
    out = run(evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED))
    assert out.returncode == 0, out.stderr
    got = shape(ws, "s")
    assert len(got) == 1 + GENS * POP
    # the seed matters: another seed picks other parents (else this file would prove nothing)
    other = ws.parent / "other"
    assert run(evolve_args(other, "s", generations=GENS, population=POP, seed=SEED + 1)).returncode == 0
    assert shape(other, "s") != got
    return got


def check_same_as_reference(ws, reference) -> None:
    assert shape(ws, "s") == reference
    counts = evaluated_counts(ws, "s")
    assert set(counts.values()) == {1}, counts
    kbench_fsck_clean(ws)


@pytest.mark.parametrize("seed", [1, 2])
def test_killed_at_random_moments_it_ends_like_an_uninterrupted_run(tmp_path, reference, seed):
    rng = random.Random(seed)
    ws = tmp_path / "ws"
    args = evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED)
    kills = 0
    for _ in range(6):
        proc = start(args, env={"KBENCH_FAKE_EVAL_DELAY": "0.15"})
        time.sleep(rng.uniform(0.35, 0.8))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        kills += 1
    assert kills >= 3
    done = run(args)
    assert done.returncode == 0, done.stdout + done.stderr
    check_same_as_reference(ws, reference)


def sweep(tmp_path, reference, points: range) -> int:
    """Kill at the n-th write point (any kind) for n in `points`, count the processes the killed kbench left
    (tests/reaper.py: none may be), resume, compare. Returns the runs made."""
    made = 0
    for n in points:
        ws = tmp_path / f"ws{n}"
        args = evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED)
        killed = run([sys.executable, "-m", "tests.reaper", "5", "--", *args], env={"KBENCH_CRASHPOINT": f"any:{n}"})
        if killed.returncode == 0:
            return made       # past the last write point of a whole run
        assert killed.returncode == 128 + signal.SIGKILL, killed.stdout + killed.stderr
        left = [ln for ln in killed.stdout.splitlines() if ln.startswith("left ")]
        assert left == ["left []"], f"kill at write point {n} left: {left}"
        done = run(args)
        assert done.returncode == 0, f"kill at write point {n}: " + done.stdout + done.stderr
        check_same_as_reference(ws, reference)
        made += 1
    return made


def test_killed_at_write_points_across_a_whole_run_it_ends_the_same(tmp_path, reference):
    # every 13th write point (commit objects, note objects, before / during / after each ref update), so
    # every kind and every phase of the session is hit; the full sweep is the slow test below
    assert sweep(tmp_path, reference, range(1, 10_000, 13)) >= 8


NO_GPU = {"KBENCH_FAKE_NO_GPU": "1", "KBENCH_FAKE_EVAL_DELAY": "0.5"}


@pytest.mark.parametrize("point", ["before-commit-object:2", "before-commit-object:3", "before-commit-object:4"])
def test_a_kill_before_a_commit_without_a_gpu_resumes_to_the_uninterrupted_run(tmp_path, reference, point):
    """Without a GPU the queued candidates are evaluated again on a resume (compiled, still waiting), which takes
    a while on a real compiler: the generation the kill cut short must still be completed from them, not left at
    the candidates committed before the kill on every later resume; and a GPU run then goes on to the same end."""
    args = lambda ws: evolve_args(ws, "s", generations=GENS, population=POP, seed=SEED)
    ref = tmp_path / "ref"
    assert run(args(ref), env=NO_GPU).returncode == 3
    ws = tmp_path / "ws"
    killed = run(args(ws), env={**NO_GPU, "KBENCH_CRASHPOINT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    for _ in range(2):
        again = run(args(ws), env=NO_GPU)
        assert again.returncode == 3, again.stdout + again.stderr
        assert shape(ws, "s") == shape(ref, "s")
    done = run(args(ws))
    assert done.returncode == 0, done.stdout + done.stderr
    check_same_as_reference(ws, reference)


@pytest.mark.slow
@pytest.mark.skipif(env_raw("KBENCH_TEST_EXHAUSTIVE") != "1",
                    reason="every write point in turn (250 kills, 10-15 min): KBENCH_TEST_EXHAUSTIVE=1 runs it; the "
                           "sweep of every 13th point above runs always")
def test_killed_at_every_write_point_it_ends_the_same(tmp_path, reference):
    assert sweep(tmp_path, reference, range(1, 10_000)) >= 80
