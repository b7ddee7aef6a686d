"""The dispatch tables are complete: every logged event type has an evolver and is either
projected onto the wire or listed as deliberately silent; every command the domain knows has a
decider; every client command name has a parser. A forgotten registration would otherwise fail
silently (an event never sent, a command never decided)."""

from __future__ import annotations

from duplex_es.domain import COMMAND_TYPES, KINDS, named
from duplex_es.events import CommandRejected, SessionDetached, SessionResumed, registry
from duplex_es.protocol import CLIENT_EVENT_TYPES
from duplex_es.protocol.wire import PROJECTIONS, SILENT_EVENT_TYPES

#: Commands ``decide`` handles before dispatching by kind, and the host's own.
_DECIDED_UP_FRONT = {"session.open", "command.duplicate"}
_INTERNAL = {"session.open", "session.detach", "session.expire", "session.pump", "command.duplicate"}


def catalogue() -> dict:
    """The project's event types (other tests register event types of their own)."""
    return {name: cls for name, cls in registry().items() if cls.__module__.startswith("duplex_es.")}


def test_every_event_type_has_an_evolver_in_some_kind_and_every_kind_takes_refusals_and_leases():
    evolved = {cls for kind in KINDS for cls in kind.evolvers}
    missing = [name for name, cls in catalogue().items() if cls not in evolved]
    assert missing == []
    for kind in KINDS:
        assert {CommandRejected, SessionDetached, SessionResumed, kind.start_event} <= set(kind.evolvers), kind.name
        assert set(kind.ended_by) <= set(kind.evolvers), kind.name


def test_each_kind_names_its_own_state_and_start():
    assert len({k.name for k in KINDS}) == len({k.state_type for k in KINDS}) == len({k.start_event for k in KINDS}) == len(KINDS)
    for kind in KINDS:
        empty = kind.state_type()
        assert empty.status == "new" and not empty.is_open and empty.seq == 0, kind.name
        assert "new" in kind.transitions, kind.name


def test_every_event_type_is_projected_or_listed_as_silent_never_both():
    projected = {name for name, cls in catalogue().items() if cls in PROJECTIONS}
    assert set(catalogue()) - projected == SILENT_EVENT_TYPES
    assert not projected & SILENT_EVENT_TYPES


def test_every_command_has_a_decider_and_every_client_command_a_parser():
    speech = {COMMAND_TYPES[c] for c in named("speech").deciders if c in COMMAND_TYPES}
    world = {named("world").command_types[c] for c in named("world").deciders}
    assert set(COMMAND_TYPES.values()) - speech - _DECIDED_UP_FRONT == set(), "commands no speech decider takes"
    assert {"session.detach", "session.expire", "session.pump", "session.resume"} <= world
    from duplex_es.domain import Detach, Expire, Pump, Resume

    for kind in KINDS:  # any kind: each named command is decided or opens the session; the host's own are decided
        undecided = {cmd for cmd in kind.command_types if cmd not in kind.deciders and cmd is not kind.start_command}
        assert undecided <= {c for c in kind.command_types if kind.command_types[c] in _DECIDED_UP_FRONT}, (kind.name, undecided)
        assert {Detach, Expire, Pump, Resume} <= set(kind.deciders), kind.name
    client = set(COMMAND_TYPES.values()) - _INTERNAL
    assert client - CLIENT_EVENT_TYPES == set(), "client commands no parser reads"
