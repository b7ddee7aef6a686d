"""The dispatch tables are complete: every logged event type has an evolver and is either
projected onto the wire or listed as deliberately silent; every command the domain knows has a
decider; every client command name has a parser. A forgotten registration would otherwise fail
silently (an event never sent, a command never decided)."""

from __future__ import annotations

import duplex_es.domain  # noqa: F401  (registers the deciders and evolvers)
import duplex_es.protocol  # noqa: F401  (registers the projections)
from duplex_es.domain import COMMAND_TYPES
from duplex_es.domain.rules import decider, evolver
from duplex_es.domain.world import world_decider
from duplex_es.events import registry
from duplex_es.protocol import CLIENT_EVENT_TYPES
from duplex_es.protocol.outbound import SILENT_EVENT_TYPES, _project

#: Commands ``decide`` handles before dispatching by kind, and the host's own.
_DECIDED_UP_FRONT = {"session.open", "command.duplicate"}
_INTERNAL = {"session.open", "session.detach", "session.expire", "session.pump", "command.duplicate"}


def catalogue() -> dict:
    """The project's event types (other tests register event types of their own)."""
    return {name: cls for name, cls in registry().items() if cls.__module__.startswith("duplex_es.")}


def test_every_event_type_has_an_evolver():
    missing = [name for name, cls in catalogue().items() if cls not in evolver.registry]
    assert missing == []


def test_every_event_type_is_projected_or_listed_as_silent_never_both():
    projected = {name for name, cls in catalogue().items() if cls in _project.registry}
    assert set(catalogue()) - projected == SILENT_EVENT_TYPES
    assert not projected & SILENT_EVENT_TYPES


def test_every_command_has_a_decider_and_every_client_command_a_parser():
    speech = {COMMAND_TYPES[c] for c in decider.registry if c in COMMAND_TYPES}
    world = {COMMAND_TYPES[c] for c in world_decider.registry if c in COMMAND_TYPES}
    assert set(COMMAND_TYPES.values()) - speech - _DECIDED_UP_FRONT == set(), "commands no speech decider takes"
    assert {"session.detach", "session.expire", "session.pump", "session.resume"} <= world
    client = set(COMMAND_TYPES.values()) - _INTERNAL
    assert client - CLIENT_EVENT_TYPES == set(), "client commands no parser reads"
