"""``evolve(state, seq, event) -> state``: the one writer of session state.

Pure: no clock, no randomness, no I/O (docs/architecture.md, I2). A live session's state is always
``fold(evolve, its events)`` (docs/architecture.md, I1); :func:`fold` is that fold. The rules per
event live in the concern modules; the session's kind (:mod:`duplex_es.domain.kinds`) lists
which evolver applies which event, and which status moves are allowed.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from duplex_es.domain.kind import IllegalTransition
from duplex_es.domain.kinds import KINDS, kind_of, started_by
from duplex_es.domain.replace import replace
from duplex_es.events import Event

__all__ = ["evolve", "fold", "new_state", "REDUCER_VERSION"]

#: The version of the fold. Bump it whenever a change to the evolvers or the state classes would
#: fold some existing log to a different state: snapshots taken by another version are then
#: ignored and rebuilt from the log (issue 5, snapshots).
REDUCER_VERSION = 6  # 6: full-duplex units carry client items and turn requests, and function calls (state.duplex.items); 5: function calls (items of type function_call / function_call_output, state.calls); 4: a response keeps the real cause of its end (status_error_code); 3: client settings, input transcription, idle timeout, usage (issue 10); 2: snapshots keep dict order


def new_state() -> Any:
    """The state of a session before its first event (the default kind's empty state; the
    first event decides the kind)."""
    return KINDS[0].state_type()


def evolve(state: Any, seq: int, event: Event) -> Any:
    """Apply the event logged at ``seq`` to ``state`` and return the new state. A session's
    first event decides its kind: ``world.session.started`` makes a world session.

    Raises:
        TypeError: for an event type the session's kind does not know.
        IllegalTransition: the event moved the session's status along an edge its kind does
            not allow.
    """
    kind = kind_of(state)
    if state.status == "new":
        starting = started_by(event)
        if starting is not None and starting is not kind:
            kind, state = starting, starting.state_type()
    evolver = kind.evolvers.get(type(event))
    if evolver is None:
        raise TypeError(f"the {kind.name} reducer does not handle {type(event).__name__} ({event.TYPE})")
    new = evolver(event, state, seq)
    if new.status is not state.status and new.status != state.status and new.status not in kind.transitions.get(state.status, ()):
        raise IllegalTransition(f"{kind.name} session {state.session_id or new.session_id}", seq, event.TYPE, str(state.status), str(new.status))
    # An evolver on the hot path sets ``seq`` in the copy it makes anyway (one copy, not two).
    return new if new.seq == seq else replace(new, seq=seq)


def fold(events: Iterable[tuple[int, Event]], state: Optional[Any] = None) -> Any:
    """Fold ``(seq, event)`` pairs into a state, starting from ``state`` or an empty one.

    The same state as :func:`evolve` applied to each pair in turn. Runs of events of one class
    the session's kind folds at once (:attr:`~duplex_es.domain.kind.SessionKind.run_evolvers`:
    a speech session's audio appends) are applied in one step each.

    Raises:
        TypeError, IllegalTransition: as :func:`evolve`.
    """
    s = state if state is not None else new_state()
    run_type: Optional[type] = None
    seqs: list[int] = []
    run: list[Event] = []
    for seq, ev in events:
        t = type(ev)
        if run:
            if t is run_type:
                seqs.append(seq)
                run.append(ev)
                continue
            s = _apply_run(s, seqs, run)
            seqs, run = [], []
        # Only once the session is open (its first event chose the kind); a run evolver never
        # changes the status, so the run needs no transition check.
        if s.status != "new" and t in kind_of(s).run_evolvers:
            run_type = t
            seqs.append(seq)
            run.append(ev)
        else:
            s = evolve(s, seq, ev)
    return _apply_run(s, seqs, run) if run else s


def _apply_run(state: Any, seqs: list[int], run: list[Event]) -> Any:
    if len(run) == 1:
        return evolve(state, seqs[0], run[0])
    return kind_of(state).run_evolvers[type(run[0])](state, seqs, run)
