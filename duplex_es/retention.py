"""Retention: erase the content of sessions that ended more than N days ago (docs/privacy.md,
"Retention"; issue 17).

``serve --retain-days N`` keeps every principal's ended sessions N days; a key of the API keys
file may set its own ``retain_days``. A server sweeps every ``--retention-interval-ms``: it finds
the sealed sessions whose end (``session.closed``, ``session.expired``, ``world.session.closed``)
was recorded before their principal's limit and erases each by the one erasure path
(:func:`duplex_es.erasure.erase_session`, ``by="retention"``), so each gets its
``session.erased`` with the time the sweep used (docs/architecture.md, I11) and a line in the
server's log. Sessions recorded in the clear are not candidates (nothing to destroy); one with
part of its content in the clear is refused (``not_sealed``) and named in the log once. Several
servers may sweep the same database: an erasure another server did first is skipped.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping, Optional

import attrs

from duplex_es.domain.kinds import ENDED_BY
from duplex_es.erasure import Erasure, ErasureRefused, erase_session
from duplex_es.store import EventLog, WrongExpectedSeq
from duplex_es.store.archives import archived_sealed_ended_before

__all__ = ["RetentionPolicy", "sweep", "DAY_US"]

log = logging.getLogger(__name__)

#: Microseconds in a day.
DAY_US = 86_400 * 1_000_000

_ENDED_TYPES = tuple(t.TYPE for t in ENDED_BY)
_PAGE = 1000


@attrs.frozen
class RetentionPolicy:
    """How long ended sessions keep their content.

    Attributes:
        default_days: for sessions whose principal sets nothing (``None``: kept for ever).
        per_principal: principal name → days (from the API keys file's ``retain_days``).
    """

    default_days: Optional[float] = None
    per_principal: Mapping[str, float] = attrs.field(factory=dict)

    def days_for(self, principal: Optional[str]) -> Optional[float]:
        """The days a session opened by ``principal`` is kept after it ends (``None``: for ever)."""
        if principal is not None and principal in self.per_principal:
            return self.per_principal[principal]
        return self.default_days

    @property
    def active(self) -> bool:
        """Whether any session is ever erased by this policy."""
        return self.default_days is not None or bool(self.per_principal)


def sweep(elog: EventLog, policy: RetentionPolicy, *, now_us: Optional[int] = None, refused: Optional[set[str]] = None) -> list[Erasure]:
    """Erase every sealed session past its retention (see the module); returns the erasures
    done now. Blocking: a server runs it in a thread.

    Args:
        now_us: the time the sweep uses (Unix µs; default the clock): logged in each erasure.
        refused: sessions already named as refused (``not_sealed``): named in the log only the
            first time; the set is updated.
    """
    if not policy.active:
        return []
    now = time.time_ns() // 1000 if now_us is None else now_us
    shortest = min([d for d in (policy.default_days, *policy.per_principal.values()) if d is not None])
    candidates: list[tuple[str, int]] = []
    while True:
        page = elog.sessions_ended_before(_ENDED_TYPES, now - int(shortest * DAY_US), _PAGE, len(candidates), sealed_only=True)
        candidates += page
        if len(page) < _PAGE:
            break
    principals = {sid: getattr(rec.event, "principal", None) for sid, rec in elog.first_events([s for s, _ in candidates]).items()}
    # Archived sessions: their first event is in a file, their principal and end in their record.
    for rec in archived_sealed_ended_before(elog.db, now - int(shortest * DAY_US)):
        candidates.append((rec.session_id, rec.ended_at_us))
        principals[rec.session_id] = rec.principal
    seen = refused if refused is not None else set()
    done: list[Erasure] = []
    for sid, ended_us in candidates:
        days = policy.days_for(principals.get(sid))
        if days is None or ended_us >= now - int(days * DAY_US):
            continue
        try:
            erasure = erase_session(elog, sid, by="retention", reason=f"retain_days={days:g}", now_us=now)
        except ErasureRefused as err:
            if sid not in seen:
                seen.add(sid)
                log.warning("retention: session %s not erased (%s): %s", sid, err.code, err)
            continue
        except WrongExpectedSeq:  # another server's sweep (or a late event) got there first: next sweep
            continue
        if not erasure.already:
            log.info("retention: erased session %s (ended %d days ago; kept %g days): %d sealed events", sid, (now - ended_us) // DAY_US, days, erasure.sealed_events)
            done.append(erasure)
    return done
