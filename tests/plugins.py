"""Engine plugins for tests: stand-ins for a misbehaving GPU model (loaded by a real worker
process with ``--engine-plugin plugins:Class``)."""

from __future__ import annotations

import attrs

from duplex_es.worker.engine import EngineError, EngineOutput, TickContext
from duplex_es.worker.speech.engine import CascadeSpeechEngine
from duplex_es.worker.world.engine import WorldContext, WorldEngine, WorldOutput


class MismatchWorld(WorldEngine):
    """Renders correctly, but from chunk 2 on claims the output is for the next chunk: the
    session must fail closed rather than commit it."""

    name = "test.mismatch_world/1"

    def step(self, ctx: WorldContext) -> WorldOutput:
        out = super().step(ctx)
        if ctx.tick.chunk_index >= 2:
            return attrs.evolve(out, echo=attrs.evolve(out.echo, chunk_index=ctx.tick.chunk_index + 1))
        return out


class FailingSpeech(CascadeSpeechEngine):
    """Speaks the first chunk of every reply, then fails on the second (a model that crashes
    mid-response): the response must end ``failed`` with the logged reason."""

    name = "test.failing_speech/1"

    def step(self, ctx: TickContext) -> EngineOutput:
        if ctx.tick.chunk_index == 1:
            raise EngineError("engine_failed", "the test model fell over on chunk 1")
        return super().step(ctx)


class WrongKind:
    """An engine for a tick kind no worker runs (``video``): the worker refuses to load it."""

    name = "wrong-kind"
    kinds = ("video",)

    def step(self, ctx):  # type: ignore[no-untyped-def]
        raise AssertionError("never run")
