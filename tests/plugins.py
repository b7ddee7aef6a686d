"""Engine plugins for tests: stand-ins for a misbehaving or a batched GPU model (loaded by a
real worker process with ``--engine-plugin plugins:Class``)."""

from __future__ import annotations

import attrs

import json

from duplex_es.events import FunctionCallChunk
from duplex_es.worker.engine import EngineError, EngineOutput, TickContext, UnitContext, UnitOutputs
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


class ToolCallingModel:
    """A model written against the engine protocol alone (no reference code), as a GPU
    plugin would be: it calls the response's first tool with ``{"q": <what the user typed>}``,
    streaming the arguments over two ticks, and once the call's output is in the history it
    says it (text). It shows function calling needs nothing of the worker beyond ``step``."""

    name = "test.tool_calling_model/1"
    kinds = ("speech",)

    def step(self, ctx: TickContext) -> EngineOutput:
        inputs, k = ctx.tick.inputs, ctx.tick.chunk_index
        last = inputs.history[-1] if inputs.history else None
        if last is not None and last.type == "function_call_output":
            return EngineOutput(echo=ctx.identity, text_delta=f"The tool said: {last.output}", final=True)
        arguments = json.dumps({"q": inputs.user_text})
        half = len(arguments) // 2
        piece = arguments[:half] if k == 0 else arguments[half:]
        call = FunctionCallChunk(call_id=f"call_{ctx.tick.response_id}", name=inputs.tools[0]["name"], arguments_delta=piece, done=k == 1)
        return EngineOutput(echo=ctx.identity, function_call=call, final=k == 1)


class BatchedSpeech:
    """A speech model that steps a whole batch of sessions at once (``step_batch``), as a GPU
    model runs one forward pass: every reply is two chunks of 100 ms of audio, and each
    chunk's text names the size of the batch it was stepped in (``"[batch of 3] "``), so the
    batching is visible in the log and on the wire even when a worker process ran it. A user
    who typed ``fail`` gets an :class:`EngineError` for that tick alone. ``batch_sizes``
    records the size of every batch stepped (in process)."""

    name = "test.batched_speech/1"
    kinds = ("speech",)

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def step(self, ctx: TickContext) -> EngineOutput:
        [out] = self.step_batch([ctx])
        if isinstance(out, EngineError):
            raise out
        return out

    def step_batch(self, ctxs: list[TickContext]) -> list[EngineOutput | EngineError]:
        self.batch_sizes.append(len(ctxs))
        assert len({ctx.session_id for ctx in ctxs}) == len(ctxs), "a batch holds one tick per session"
        return [self._one(ctx, len(ctxs)) for ctx in ctxs]

    @staticmethod
    def _one(ctx: TickContext, size: int) -> EngineOutput | EngineError:
        if "fail" in ctx.tick.inputs.user_text:
            return EngineError("engine_failed", "the test model was told to fail")
        k = ctx.tick.chunk_index
        return EngineOutput(echo=ctx.identity, audio=b"\x00\x00" * 2400, text_delta=f"[batch of {size}] ", final=k == 1)


class BatchedDuplexListener:
    """A full-duplex model stepping every claimed unit of a batch at once (``step_batch``): it
    always listens, and leaves in its engine state how many units it has heard in this session
    and the size of the batch it heard the latest one in (``{"units": 2, "batch": 3}``).
    ``batch_sizes`` records every batch stepped (in process)."""

    name = "test.batched_duplex_listener/1"
    kinds = ("duplex",)

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def step(self, ctx: UnitContext) -> UnitOutputs:
        return self.step_batch([ctx])[0]

    def step_batch(self, ctxs: list[UnitContext]) -> list[UnitOutputs]:
        self.batch_sizes.append(len(ctxs))
        assert len({ctx.session_id for ctx in ctxs}) == len(ctxs), "a batch holds one unit per session"
        return [
            UnitOutputs(
                echo=ctx.identity,
                listen_reason="user_speaking",
                engine_state={"units": (ctx.tick.engine_state or {}).get("units", 0) + 1, "batch": len(ctxs)},
            )
            for ctx in ctxs
        ]


class WrongKind:
    """An engine for a tick kind no worker runs (``video``): the worker refuses to load it."""

    name = "wrong-kind"
    kinds = ("video",)

    def step(self, ctx):  # type: ignore[no-untyped-def]
        raise AssertionError("never run")
