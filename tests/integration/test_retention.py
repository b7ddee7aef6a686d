"""Retention (docs/privacy.md, "Retention"): a sweep erases exactly the sealed sessions whose
end is older than their principal's limit, each with its own ``session.erased``, on both
backends."""

from __future__ import annotations

import time

from duplex_es.events import SessionClosed, SessionConfig, SessionErased, SessionOpened, TextAppended
from duplex_es.retention import DAY_US, RetentionPolicy, sweep
from duplex_es.store import Database, EventLog
from duplex_es.store.datakeys import MasterKeys

MASTER = bytes(range(32))


def _session(log: EventLog, sid: str, principal: str | None, *, ended: bool = True) -> None:
    events = [SessionOpened(session_id=sid, config=SessionConfig(model="m"), principal=principal), TextAppended(text=f"{sid} said plums")]
    log.append(sid, events + ([SessionClosed(reason="client_close")] if ended else []), expected_seq=0)


def test_a_sweep_erases_exactly_the_sessions_past_their_principals_limit(db: Database):
    sealed = EventLog(db, master_keys=MasterKeys.from_keys([MASTER]))
    for sid, who in (("a", "alice"), ("b", None), ("clinic1", "clinic")):
        _session(sealed, sid, who)
    _session(sealed, "open", "alice", ended=False)  # still going: never a candidate
    _session(EventLog(db), "clear", "alice")  # recorded without the key: nothing to destroy
    policy = RetentionPolicy(3, {"clinic": 7})
    now = time.time_ns() // 1000

    assert sweep(sealed, policy, now_us=now + 1 * DAY_US) == []
    day4 = now + 4 * DAY_US
    assert sorted(e.session_id for e in sweep(sealed, policy, now_us=day4)) == ["a", "b"]
    assert sweep(sealed, policy, now_us=day4 + 1) == []  # erased sessions are no candidates again
    assert [e.session_id for e in sweep(sealed, policy, now_us=now + 8 * DAY_US)] == ["clinic1"]

    for sid in ("a", "b", "clinic1"):
        recs = sealed.read_session(sid)
        erased = recs[-1].event
        assert isinstance(erased, SessionErased) and erased.by == "retention" and recs[1].withheld and recs[1].event.text == ""
        assert erased.at_us == (day4 if sid != "clinic1" else now + 8 * DAY_US)
        assert erased.reason == ("retain_days=7" if sid == "clinic1" else "retain_days=3")
    for sid in ("open", "clear"):
        assert not any(isinstance(r.event, SessionErased) for r in sealed.read_session(sid))
    assert sealed.read_session("open")[1].event.text == "open said plums"


def test_no_policy_erases_nothing(db: Database):
    sealed = EventLog(db, master_keys=MasterKeys.from_keys([MASTER]))
    _session(sealed, "a", None)
    assert not RetentionPolicy().active
    assert sweep(sealed, RetentionPolicy(), now_us=time.time_ns() // 1000 + 10_000 * DAY_US) == []
    assert sealed.read_session("a")[1].event.text == "a said plums"
