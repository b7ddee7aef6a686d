"""The engine test kit (``duplex_es_tools.testkit``) passes engines that echo their ticks and
catches one that does not, for speech and world sessions, on a real log and worker loop."""

from __future__ import annotations

import attrs
import pytest

from duplex_es.worker.engine import EngineOutput, TickContext
from duplex_es.worker.world.engine import WorldEngine
from duplex_es_tools.testkit import assert_engine_ok, check_engine, tone

from plugins import MismatchWorld


class ThreeChunks:
    """A speech model's stand-in: three 200 ms chunks per response, the first after hearing the turn."""

    name = "test.three_chunks/1"
    kinds = ("speech",)

    def step(self, ctx: TickContext) -> EngineOutput:
        k = ctx.tick.chunk_index
        if k == 0:
            assert ctx.read_audio(ctx.tick.inputs.user_audio), "the turn's audio is readable"
        return EngineOutput(echo=ctx.identity, audio=tone(200), text_delta=f"w{k} ", new_item=k == 0, final=k == 2)


class WrongEpoch(ThreeChunks):
    """Answers the second chunk as if it belonged to another epoch."""

    name = "test.wrong_epoch/1"

    def step(self, ctx: TickContext) -> EngineOutput:
        out = super().step(ctx)
        return attrs.evolve(out, echo=attrs.evolve(out.echo, epoch=out.echo.epoch + 1)) if ctx.tick.chunk_index == 1 else out


def test_a_speech_engine_that_echoes_its_ticks_passes(tmp_path):
    check = assert_engine_ok(ThreeChunks(), directory=tmp_path)
    assert check.kind == "speech" and check.steps == 3 and check.audit.ok
    assert [e["response"]["status"] for e in check.wire if e["type"] == "response.done"] == ["completed"]


def test_a_speech_engine_that_echoes_the_wrong_epoch_is_caught(tmp_path):
    check = check_engine(WrongEpoch(), directory=tmp_path, timeout_s=20)
    assert not check.ok and len(check.mismatches) == 1 and "step 1" in check.mismatches[0]
    with pytest.raises(AssertionError, match="epoch"):
        assert_engine_ok(WrongEpoch(), timeout_s=20)


def test_the_reference_world_engine_passes_and_a_mismatching_one_is_caught():
    check = assert_engine_ok(WorldEngine(), chunks=4)
    assert check.kind == "world" and check.steps == 4
    bad = check_engine(MismatchWorld(), chunks=4, timeout_s=20)
    assert not bad.ok and bad.mismatches and "chunk_index=3" in bad.mismatches[0]


def test_an_engine_of_another_kind_is_refused():
    class Transcriber:
        name, kinds = "test.transcriber/1", ("transcription",)

    with pytest.raises(ValueError, match="speech or world"):
        check_engine(Transcriber())
