"""What refusals keep of client strings is bounded (docs/security.md, "Failure paths and bounds")."""

from __future__ import annotations

import json

import pytest

from duplex_es.domain import Code, Invalid, decide, evolve, named
from duplex_es.domain.rules import MAX_FIELD_CHARS, clip, rejection
from duplex_es.domain.world import RefuseInteraction, StartWorld
from duplex_es.events import WorldConfig, to_plain
from duplex_es.protocol.world import parse_world_frame
from duplex_es.server.handshake import handshake_protocol

HUGE = "x" * 1_000_000


def test_clip_keeps_short_strings_and_says_how_long_a_cut_one_was() -> None:
    assert clip("abc", 3) == "abc"
    cut = clip("abcdef", 3)
    assert cut == "abc…[+3 of 6 chars]"


def test_a_rejection_keeps_an_excerpt_of_each_client_string() -> None:
    ev = rejection(HUGE, HUGE, Code.INVALID_EVENT, HUGE, HUGE, HUGE)
    stored = json.dumps(to_plain(ev))
    assert len(stored) < 2_500
    assert ev.client_event_id is not None and ev.client_event_id.startswith("x" * MAX_FIELD_CHARS + "…[+")
    assert ev.excerpt is not None and ev.excerpt.endswith(f"of {len(HUGE)} chars]")


def test_a_world_refusal_keeps_an_excerpt_of_its_message() -> None:
    state = named("world").state_type()
    (started,) = decide(state, StartWorld(session_id="world_b", config=WorldConfig(), at_ms=1))
    state = evolve(state, 1, started)
    (refused,) = decide(state, RefuseInteraction(event_id=1, code=Code.INVALID_INTERACTION, message=HUGE, param=HUGE))
    assert len(json.dumps(to_plain(refused))) < 1_500


@pytest.mark.parametrize(
    "message",
    [
        {"type": "session.reset", "event_id": HUGE},
        {"type": "no.such.type", "event_id": HUGE},
    ],
)
def test_a_world_event_id_over_256_characters_is_refused(message: dict) -> None:
    command = parse_world_frame(json.dumps(message), lambda p: f"{p}_1", 0, started=True, session_id="world_b")
    assert isinstance(command, Invalid)
    assert (command.code, command.param, command.event_id) == (Code.INVALID_EVENT, "event_id", None)


def test_world_control_names_and_data_are_bounded() -> None:
    for control, param in (
        ({"track": "t" * 129, "schema": "s"}, "controls[0].track"),
        ({"track": "t", "schema": "s" * 129}, "controls[0].schema"),
        ({"track": "t", "schema": "s", "data": {"k": "v" * 20_000}}, "controls[0].data"),
    ):
        command = parse_world_frame(
            json.dumps({"type": "session.interaction", "event_id": 1, "controls": [control]}), lambda p: p, 0, started=True, session_id="w"
        )
        assert isinstance(command, RefuseInteraction) and command.param == param, command


def test_the_handshake_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        handshake_protocol(0)
