"""kbench_tui.workers: a background call's value comes back as the typed message its asker named, a failure as
its failure message (or the default notification), and a call superseded in an exclusive group posts nothing,
so a slow first listing never overwrites a newer one."""

from __future__ import annotations

import asyncio
import threading

from textual.app import App

from kbench_tui.workers import Done, Failed, ThreadedMixin


class Listed(Done[list]):
    """A listing."""


class Broke(Failed):
    """A call that raised, said by the asker."""


class Probe(ThreadedMixin, App):
    def __init__(self) -> None:
        super().__init__()
        self.listed: list[list] = []
        self.broke: list[str] = []

    def on_listed(self, message: Listed) -> None:
        self.listed.append(message.value)

    def on_broke(self, message: Broke) -> None:
        self.broke.append(f"{message.what}: {message.error}")


async def _until(pilot, pred, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if pred():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out")


def test_values_and_failures_come_back_as_the_askers_messages():
    asyncio.run(_values_and_failures())


async def _values_and_failures():
    app = Probe()
    async with app.run_test() as pilot:
        app.background(lambda: [1, 2], done=Listed, what="list")
        app.background(lambda: 1 / 0, done=Listed, failed=Broke, what="divide")
        await _until(pilot, lambda: app.listed and app.broke)
        assert app.listed == [[1, 2]] and app.broke == ["divide: division by zero"]


def test_a_failure_without_its_own_message_is_notified():
    asyncio.run(_failure_notified())


async def _failure_notified():
    app = Probe()
    async with app.run_test() as pilot:
        app.background(lambda: {}["missing"], done=Listed, what="sessions")
        await _until(pilot, lambda: any("sessions:" in n.message for n in app._notifications))
        assert app.listed == [] and app.broke == []


def test_a_superseded_exclusive_call_posts_nothing():
    asyncio.run(_superseded())


async def _superseded():
    app = Probe()
    release = threading.Event()

    def slow() -> list:
        release.wait(10)
        return ["stale"]
    async with app.run_test() as pilot:
        app.background(slow, done=Listed, what="sessions", exclusive=True)
        await pilot.pause(0.1)
        app.background(lambda: ["fresh"], done=Listed, what="sessions", exclusive=True)
        await _until(pilot, lambda: app.listed)
        release.set()
        await pilot.pause(0.5)
        assert app.listed == [["fresh"]]
