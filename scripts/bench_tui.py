#!/usr/bin/env python
"""Benchmark the TUI on a big session: time to open the session screen (push it until every candidate row
is in the table and the plot is drawn) and to move between candidates (a `j` key press until the app is
idle again, i.e. the cursor moved and the selection line was redrawn).

    python scripts/bench_workspace.py --dir /tmp/ws-bench --keep     # builds session "big"
    python scripts/bench_tui.py --dir /tmp/ws-bench [--session big] [--moves 50]

Runs the app headless (App.run_test) at 120x35; the workspace is opened fresh (no warm caches).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def bench(args) -> dict:
    from kbench_tui.app import KbenchApp
    from kbench_tui.backend import Backend
    from kbench_tui.screens.session import SessionScreen
    from tests.doubles.tui import screen_text
    from kbench_tui.widgets.lineage_table import LineageTable
    from textual import events

    out: dict = {}
    opens, firsts, colds = [], [], []
    listing = []
    for rep in range(args.repeat):
        from engine.workspace import Workspace
        t0 = time.perf_counter()
        with Workspace.open(args.dir) as w:     # the engine's part of a cold open, alone
            w.candidates(args.session, strict=False)
        listing.append(time.perf_counter() - t0)
        # cold: a fresh Workspace and a home screen that did not list the sessions' candidates
        backend = Backend(args.dir, gpus=[], env={})
        app = KbenchApp(backend=backend)
        app.prefetch_generations = False
        async with app.run_test(size=(120, 35)) as pilot:
            while getattr(app.screen, "sessions_loaded", None) is None:
                await asyncio.sleep(0.01)
            await pilot.pause()
            t0 = time.perf_counter()
            screen = SessionScreen(args.session)
            app.push_screen(screen)
            while not getattr(screen, "loaded", False):
                await asyncio.sleep(0.005)
            await pilot.pause()
            colds.append(time.perf_counter() - t0)
        backend.close()
        # as a user gets there: the app opens on home, which lists the sessions (in a worker), then enter
        backend = Backend(args.dir, gpus=[], env={})
        app = KbenchApp(backend=backend)
        async with app.run_test(size=(120, 35)) as pilot:
            while getattr(app.screen, "sessions_loaded", None) is None:
                await asyncio.sleep(0.01)
            await pilot.pause()
            t0 = time.perf_counter()
            screen = SessionScreen(args.session)
            app.push_screen(screen)
            first = None
            while not getattr(screen, "loaded", False):
                await asyncio.sleep(0.005)
                if first is None and screen.is_attached and screen.query(LineageTable):
                    first = time.perf_counter() - t0
            await pilot.pause()
            opens.append(time.perf_counter() - t0)
            firsts.append(first or 0.0)
            rows = screen.query_one(LineageTable).row_count
            if rep == args.repeat - 1:
                moves = []
                table = screen.query_one(LineageTable)
                for i in range(args.moves):
                    # key event posted -> binding -> cursor moved -> selection line updated -> one full
                    # frame of the screen rendered (an upper bound: a real frame repaints only what changed)
                    before = table.cursor_row
                    key = "j" if i % 10 != 9 else "right_square_bracket"
                    t1 = time.perf_counter()
                    app.post_message(events.Key(key, "j" if key == "j" else "]"))
                    while table.cursor_row == before or screen.current_candidate() not in str(
                            screen.query_one("#selection").text):
                        await asyncio.sleep(0)
                    screen_text(app)
                    moves.append((time.perf_counter() - t1) * 1000)
                    await pilot.pause()
                t2 = time.perf_counter()
                await pilot.press("enter")
                while not getattr(app.screen, "loaded", False):
                    await asyncio.sleep(0.005)
                await pilot.pause()
                out["open_candidate_s"] = time.perf_counter() - t2
                out.update(move_median_ms=statistics.median(moves), move_p90_ms=sorted(moves)[int(0.9 * len(moves))],
                           move_max_ms=max(moves), moves=len(moves))
        backend.close()
    out.update(engine_listing_median_s=statistics.median(listing), cold_median_s=statistics.median(colds), cold_min_s=min(colds), cold_max_s=max(colds))
    out.update(rows=rows, open_median_s=statistics.median(opens), open_min_s=min(opens), open_max_s=max(opens),
               screen_shown_s=statistics.median(firsts), runs=len(opens),
               machine=f"{platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}",
               load_avg_1min=os.getloadavg()[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ws-bench"))
    ap.add_argument("--session", default="big")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--moves", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"machine: {r['machine']} (load {r['load_avg_1min']:.2f})")
        print(f"session screen of {r['rows']} candidates from home (listing done): shown in {r['screen_shown_s'] * 1000:.0f} ms, all rows and "
              f"plot in median {r['open_median_s']:.3f} s (min {r['open_min_s']:.3f}, max {r['open_max_s']:.3f}, "
              f"{r['runs']} runs)")
        print(f"  cold (fresh workspace, nothing listed before): median {r['cold_median_s']:.3f} s "
              f"(min {r['cold_min_s']:.3f}, max {r['cold_max_s']:.3f}); the engine's listing alone "
              f"(Workspace.candidates, fresh): median {r['engine_listing_median_s']:.3f} s")
        print(f"move between candidates: median {r['move_median_ms']:.1f} ms, p90 {r['move_p90_ms']:.1f} ms, "
              f"max {r['move_max_ms']:.1f} ms ({r['moves']} moves)")
        print(f"open a candidate's detail (code, diff, verdicts, prompt): {r['open_candidate_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
