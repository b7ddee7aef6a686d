"""The log: SQLAlchemy Core tables, appends, reads, the global tail and the tick queue.

This layer knows events, never the domain (docs/architecture.md). What differs between databases
is a :class:`~duplex_es.store.backend.Backend`, one module each (``sqlite``, ``postgres``),
listed in :mod:`~duplex_es.store.registry` (docs/architecture.md, "Storage backends").
"""

from duplex_es.store.chain import ChainKeyError, KeyRing
from duplex_es.store.database import Database, DatabaseNotFound, default_url, resolve_url
from duplex_es.store.log import (
    ANY_SEQ,
    AppendRequest,
    AppendResult,
    EventLog,
    RawRecord,
    Recorded,
    SessionStats,
    StoredEventError,
    WrongExpectedSeq,
)
from duplex_es.store.migrate import upgrade
from duplex_es.store.notify import EVENTS_CHANNEL, TICKS_CHANNEL, Wakeup
from duplex_es.store.ownership import DEFAULT_OWNER_TTL_MS, Fence, OwnershipLost, SessionOwned, SessionOwners
from duplex_es.store.snapshots import SnapshotStore, StoredSnapshot
from duplex_es.store.ticks import Claim, ClaimLost, CommitResult, TickQueue
from duplex_es.store.backend import WriteLockBusy
from duplex_es.store.writer import GroupCommitWriter, LogHealth, LogUnavailable

__all__ = [
    "ANY_SEQ",
    "AppendRequest",
    "DEFAULT_OWNER_TTL_MS",
    "EVENTS_CHANNEL",
    "Fence",
    "GroupCommitWriter",
    "LogHealth",
    "LogUnavailable",
    "WriteLockBusy",
    "KeyRing",
    "OwnershipLost",
    "SessionOwned",
    "SessionOwners",
    "TICKS_CHANNEL",
    "Wakeup",
    "AppendResult",
    "ChainKeyError",
    "Claim",
    "ClaimLost",
    "CommitResult",
    "Database",
    "DatabaseNotFound",
    "EventLog",
    "RawRecord",
    "Recorded",
    "SessionStats",
    "SnapshotStore",
    "StoredEventError",
    "StoredSnapshot",
    "TickQueue",
    "WrongExpectedSeq",
    "default_url",
    "resolve_url",
    "upgrade",
]
