"""The session host's wake-up (duplex_es/server/alarm.py): a full-duplex reply goes on by silence
units and a realtime world by timed ticks, each woken by the alarm after the client stops
sending; an alarm that is not set again after it went off leaves the session standing still.

Run on both event loops the server may run on: asyncio's, and uvloop's (uvicorn's choice when it
is installed), whose ``loop.time()`` is a cached millisecond clock."""

from __future__ import annotations

import asyncio
import time

import pytest

from duplex_es.server.alarm import Alarm

def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    if request.param == "uvloop":
        # uvicorn[standard] (a dependency) installs it; without it the server runs on asyncio's loop only.
        uvloop = pytest.importorskip("uvloop")
        return lambda main: uvloop.run(main())
    return lambda main: asyncio.run(main())


def test_an_alarm_set_again_by_its_own_action_goes_off_every_time(run):
    # As the host does: the wake-up pumps, and the pump asks for the next wake-up a little later
    # (sub-millisecond offsets included, where a ms-granular loop clock fires "early").
    fired: list[int] = []

    async def main() -> None:
        done = asyncio.Event()

        async def action() -> None:
            fired.append(now_ms())
            await asyncio.sleep(0)  # the host reads the log before it pumps
            if len(fired) == 40:
                done.set()
            else:
                alarm.at(now_ms() + 3 + len(fired) % 3)

        alarm = Alarm(action, clock=now_ms)
        alarm.at(now_ms() + 2)
        await asyncio.wait_for(done.wait(), 10)

    run(main)
    assert len(fired) == 40


def test_the_earliest_wake_up_asked_for_is_the_one_pending(run):
    fired: list[int] = []

    async def main() -> None:
        async def action() -> None:
            fired.append(now_ms())

        alarm = Alarm(action, clock=now_ms)
        start = now_ms()
        alarm.at(start + 400)
        alarm.at(start + 30)  # earlier: replaces it
        alarm.at(start + 200)  # later: the earlier one stays
        assert alarm.due_ms == start + 30
        await asyncio.sleep(0.6)
        assert len(fired) == 1 and fired[0] - start < 300
        assert alarm.due_ms is None  # spent

    run(main)


def test_a_cancelled_alarm_does_not_go_off_and_a_past_due_time_goes_off_at_once(run):
    fired: list[str] = []

    async def main() -> None:
        async def action() -> None:
            fired.append("off")

        alarm = Alarm(action, clock=now_ms)
        alarm.at(now_ms() + 50)
        alarm.cancel()
        await asyncio.sleep(0.15)
        assert fired == []
        alarm.at(now_ms() - 1000)
        await asyncio.sleep(0.05)
        assert fired == ["off"]

    run(main)
