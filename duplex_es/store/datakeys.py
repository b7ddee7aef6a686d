"""Per-session data keys wrapped by a master key: the content of the log sealed at rest.

docs/privacy.md has the rules; in short (issue 17):

- Every session whose events hold content gets a random 256-bit *data key* at its first such
  append, in the same transaction. The key is stored in ``session_keys`` only *wrapped*:
  AES-256-GCM under the deployment's *master key* (``serve --master-key-file``, kept outside the
  database), bound to the session id.
- An event's content (:mod:`duplex_es.events.sealing`) is stored in its row's ``payload`` as
  AES-256-GCM ciphertext under the data key, with ``sealed = 1``. The associated data binds it
  to its session, seq, type and version, so a payload moved to another row does not open.
  Layout: ``audio bytes (4, big-endian) | nonce (12) | ciphertext + tag``; the audio length is in
  the clear so an erased session keeps its audio clock (I12).
- Erasing a session destroys its wrapped key (``wrapped`` set to NULL, ``erased_at_us`` set):
  nothing can open its content any more, while the chain (which covers the ciphertext) still
  verifies. Appends of content to an erased session are refused.

The master key file is a key ring like the chain key's: one hex key (32 bytes) per line, the
first wraps new data keys, the others still unwrap the keys they wrapped (rotation:
``duplex-es master-key rewrap``).
"""

from __future__ import annotations

import collections
import os
import struct
import threading
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from duplex_es.errors import LogError
from duplex_es.events.base import Event
from duplex_es.events.codec import EventDecodeError, decode, decode_sealed
from duplex_es.store.backend import driver_connection
from duplex_es.store.chain import key_id_of, read_key_file

if TYPE_CHECKING:
    from duplex_es.store.database import Database

__all__ = [
    "decode_stored",
    "KeyState",
    "CACHE_SESSIONS",
    "SEALED_V1",
    "MASTER_KEY_BYTES",
    "MasterKeyError",
    "SealError",
    "SessionErasedError",
    "MasterKeys",
    "DataKeys",
    "seal",
    "open_sealed",
    "audio_length",
    "destroy_key_in",
    "sealed_session_ids",
    "key_row",
    "SealingRequired",
    "rewrap_all",
]

#: ``events.sealed`` of a row sealed as this module describes.
SEALED_V1 = 1

#: Bytes of a master key and of a data key (AES-256).
MASTER_KEY_BYTES = 32

_NONCE = 12
_HEADER = struct.Struct(">I")


class MasterKeyError(LogError):
    """A master key file is missing, unreadable or malformed, or a wrapped key names a master
    key the ring does not hold (the message names the file and line, or the key id)."""


class SealError(LogError):
    """A sealed payload did not open: edited, cut, or moved from another row or session (the
    AEAD tag does not verify), or in a format this code does not know.

    Attributes:
        session_id, seq: the row's coordinates.
    """

    def __init__(self, session_id: str, seq: int, why: str) -> None:
        self.session_id = session_id
        self.seq = seq
        super().__init__(f"sealed content of {session_id}#{seq} does not open: {why}")


class SealingRequired(LogError):
    """Content was appended without a master key to a session whose content is sealed (a
    process started without ``--master-key-file`` on a sealed deployment): refused, nothing
    written, rather than record it in the clear.

    Attributes:
        session_id: the session.
    """

    code = "sealing_required"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id} is sealed: its content cannot be recorded by a process without the master key "
            "(start it with --master-key-file)"
        )


class SessionErasedError(LogError):
    """Content was appended to a session whose data key was erased (docs/privacy.md): refused,
    nothing written.

    Attributes:
        session_id: the session.
    """

    code = "session_erased"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} was erased: its content can no longer be recorded")


@attrs.frozen
class MasterKeys:
    """The master keys of a deployment: ``current_id`` wraps new data keys; every key in
    ``keys`` (by key id: the first 8 hex digits of its SHA-256) unwraps what it wrapped."""

    current_id: str
    keys: Mapping[str, bytes] = attrs.field(repr=False)

    @classmethod
    def from_keys(cls, keys: Sequence[bytes]) -> "MasterKeys":
        """A ring of raw 32-byte keys, the first current.

        Raises:
            MasterKeyError: no key, or one that is not 32 bytes.
        """
        if not keys:
            raise MasterKeyError("a master key ring needs at least one key")
        for k in keys:
            if len(k) != MASTER_KEY_BYTES:
                raise MasterKeyError(f"a master key must be {MASTER_KEY_BYTES} bytes, got {len(k)}")
        return cls(key_id_of(keys[0]), {key_id_of(k): bytes(k) for k in keys})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "MasterKeys":
        """Read a master key file (one 64-hex-digit key per line, the first current).

        Raises:
            MasterKeyError: unreadable, empty, or a line that is not a 32-byte hex key.
        """
        keys = read_key_file(path, "master key", MASTER_KEY_BYTES, MasterKeyError, f"`duplex-es master-key new {path}` makes one", MASTER_KEY_BYTES)
        return cls.from_keys(keys)

    def wrap(self, session_id: str, data_key: bytes) -> tuple[str, bytes]:
        """``(master key id, nonce + AES-GCM ciphertext of data_key)``, bound to ``session_id``."""
        nonce = os.urandom(_NONCE)
        return self.current_id, nonce + AESGCM(self.keys[self.current_id]).encrypt(nonce, data_key, _wrap_aad(session_id))

    def unwrap(self, session_id: str, key_id: str, wrapped: bytes) -> bytes:
        """The data key of ``session_id``.

        Raises:
            MasterKeyError: the ring has no key ``key_id``, or the wrapped key does not open
                under it for this session (edited, or another session's row).
        """
        master = self.keys.get(key_id)
        if master is None:
            raise MasterKeyError(f"session {session_id}: its data key is wrapped by master key {key_id}, which the master key file does not hold")
        try:
            return AESGCM(master).decrypt(wrapped[:_NONCE], wrapped[_NONCE:], _wrap_aad(session_id))
        except InvalidTag:
            raise MasterKeyError(f"session {session_id}: its wrapped data key does not open under master key {key_id} (edited, or moved from another session)") from None


def _wrap_aad(session_id: str) -> bytes:
    return b"duplex-es/session-key\0" + session_id.encode("utf-8", "surrogatepass")


def _event_aad(session_id: str, seq: int, type_: str, version: int, header: bytes) -> bytes:
    return f"duplex-es/event/v1\0{session_id}\0{seq}\0{type_}\0{version}\0".encode("utf-8", "surrogatepass") + header


def seal(aead: AESGCM, session_id: str, seq: int, type_: str, version: int, plaintext: bytes) -> bytes:
    """The payload of a sealed row (format :data:`SEALED_V1`) holding ``plaintext``
    (:func:`duplex_es.events.codec.encode_sealed_row`'s: content JSON, NUL, audio bytes)."""
    header = _HEADER.pack(len(plaintext) - plaintext.index(b"\0") - 1)
    nonce = os.urandom(_NONCE)
    return header + nonce + aead.encrypt(nonce, plaintext, _event_aad(session_id, seq, type_, version, header))


def audio_length(payload: bytes) -> int:
    """The audio bytes a sealed payload holds (in the clear: an erased event keeps its length)."""
    return _HEADER.unpack_from(payload)[0] if len(payload) >= _HEADER.size else 0


def open_sealed(aead: AESGCM, session_id: str, seq: int, type_: str, version: int, payload: bytes) -> bytes:
    """The plaintext of a sealed payload.

    Raises:
        SealError: the payload is too short, or does not verify for this row (edited, cut, or
            moved from another position or session).
    """
    if len(payload) < _HEADER.size + _NONCE + 16:
        raise SealError(session_id, seq, f"{len(payload)} bytes, shorter than any sealed payload")
    header, nonce = payload[: _HEADER.size], payload[_HEADER.size : _HEADER.size + _NONCE]
    try:
        return aead.decrypt(nonce, payload[_HEADER.size + _NONCE :], _event_aad(session_id, seq, type_, version, header))
    except InvalidTag:
        raise SealError(session_id, seq, "the authentication tag does not verify (edited, or moved from another row)") from None


#: Unwrapped data keys a process keeps (least recently used dropped first).
CACHE_SESSIONS = 10_000


@attrs.frozen
class KeyState:
    """A session's row of ``session_keys`` as a read found it: its cipher (``None``: no key
    — never created, or erased) and when its key was created (``None``: no row)."""

    cipher: Optional[AESGCM]
    created_at_us: Optional[int] = None


class DataKeys:
    """The data keys of the sessions one process reads and writes.

    Every use checks the session's ``session_keys`` row in the caller's transaction, so an
    erasure made by any process (another server, ``duplex-es erase``, a retention sweep)
    takes effect at once everywhere; only the unwrapping is cached, keyed by the wrapped bytes,
    and dropped when the row says the key is gone. Thread-safe.

    Args:
        master: the master key ring.
        db: the database (its backend's placeholders for the driver-level statements, and a
            read connection for :meth:`states_now`).
    """

    def __init__(self, master: MasterKeys, db: "Database") -> None:
        self.master = master
        self.db = db
        self._sql = db.backend.sql
        self._unwrapped: "collections.OrderedDict[str, tuple[bytes, AESGCM]]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def _select(self, raw: Any, session_ids: Sequence[str]) -> dict[str, tuple[Optional[str], Optional[bytes], int, Optional[int]]]:
        marks = ", ".join("?" * len(session_ids))
        rows = raw.execute(
            self._sql(f"SELECT session_id, master_key_id, wrapped, created_at_us, erased_at_us FROM session_keys WHERE session_id IN ({marks})"),
            tuple(session_ids),
        ).fetchall()
        return {r[0]: (r[1], None if r[2] is None else bytes(r[2]), r[3], r[4]) for r in rows}

    def _cipher(self, session_id: str, key_id: Optional[str], wrapped: bytes) -> AESGCM:
        with self._lock:
            got = self._unwrapped.get(session_id)
            if got is not None and got[0] == wrapped:
                self._unwrapped.move_to_end(session_id)
                return got[1]
        cipher = AESGCM(self.master.unwrap(session_id, key_id or "", wrapped))
        with self._lock:
            self._unwrapped[session_id] = (wrapped, cipher)
            while len(self._unwrapped) > CACHE_SESSIONS:
                self._unwrapped.popitem(last=False)
        return cipher

    def states(self, raw: Any, session_ids: Sequence[str]) -> dict[str, KeyState]:
        """Each session's :class:`KeyState`, read on the driver connection ``raw`` (in the
        caller's transaction: what it reads and this agree).

        Raises:
            MasterKeyError: a stored key does not unwrap (the ring lacks its master key, or it
                was edited).
        """
        rows = self._select(raw, list(dict.fromkeys(session_ids))) if session_ids else {}
        out: dict[str, KeyState] = {}
        for sid in session_ids:
            row = rows.get(sid)
            if row is None:
                out[sid] = KeyState(None)
            elif row[1] is None:
                self.forget(sid)
                out[sid] = KeyState(None, row[2])
            else:
                out[sid] = KeyState(self._cipher(sid, row[0], row[1]), row[2])
        return out

    def states_now(self, session_ids: Sequence[str]) -> dict[str, KeyState]:
        """:meth:`states` in a read transaction of its own."""
        with self.db.read() as conn:
            return self.states(driver_connection(conn), session_ids)

    def for_write(self, raw: Any, session_ids: Sequence[str], now_us: int) -> dict[str, Optional[AESGCM]]:
        """Each session's cipher for appending sealed rows, in the write transaction open on
        the driver connection ``raw``: its key, created (wrapped and inserted) for a session
        that has none yet; ``None`` for an erased session, whose content must not be
        recorded again.

        Raises:
            MasterKeyError: a stored key does not unwrap.
        """
        found = self.states(raw, session_ids)
        missing = [sid for sid, st in found.items() if st.created_at_us is None]
        for sid in missing:
            key_id, wrapped = self.master.wrap(sid, AESGCM.generate_key(bit_length=256))
            # ON CONFLICT: another process (a worker appending an output) may create the
            # session's key at the same moment; whichever commits first is the key.
            raw.execute(
                self._sql(
                    "INSERT INTO session_keys (session_id, master_key_id, wrapped, created_at_us) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (session_id) DO NOTHING"
                ),
                (sid, key_id, wrapped, now_us),
            )
        if missing:
            found.update(self.states(raw, missing))
        return {sid: st.cipher for sid, st in found.items()}

    def forget(self, session_id: str) -> None:
        """Drop the session's unwrapped key from memory (its row says it is gone)."""
        with self._lock:
            self._unwrapped.pop(session_id, None)


def decode_stored(
    cipher: Optional[AESGCM], session_id: str, seq: int, type_: str, version: int, data: str, payload: Optional[bytes], sealed: Optional[int]
) -> tuple[Event, bool]:
    """A stored row's event, and whether its content was *withheld*: sealed and not opened,
    because ``cipher`` (the session's, from :meth:`DataKeys.states`) is ``None`` — the
    session was erased, or this reader holds no master key; it then reads as
    :func:`~duplex_es.events.codec.decode_sealed` says.

    Raises:
        SealError: a sealed payload that does not open for this row (tampered or moved).
        EventDecodeError: the row does not decode; a ``sealed`` format this code does not know.
    """
    if sealed is None:
        return decode(type_, version, data, payload), False
    if sealed != SEALED_V1 or payload is None:
        raise EventDecodeError(type_, version, "bad_data", f"(sealed={sealed!r} with {'no' if payload is None else 'a'} payload: not a format this code reads)")
    if cipher is None:
        return decode_sealed(type_, version, data, None, audio_length(payload)), True
    return decode_sealed(type_, version, data, open_sealed(cipher, session_id, seq, type_, version, payload)), False


def sealed_session_ids(raw: Any, sql: Any, session_ids: Sequence[str]) -> set[str]:
    """Which of ``session_ids`` have a ``session_keys`` row (sealed, or erased), read on the
    driver connection ``raw`` (``sql``: the backend's placeholder translation)."""
    if not session_ids:
        return set()
    marks = ", ".join("?" * len(session_ids))
    return {r[0] for r in raw.execute(sql(f"SELECT session_id FROM session_keys WHERE session_id IN ({marks})"), tuple(session_ids)).fetchall()}


def key_row(raw: Any, sql: Any, session_id: str) -> Optional[tuple[bool, int, Optional[int]]]:
    """The session's ``session_keys`` row as ``(key destroyed, created_at_us, erased_at_us)``,
    or ``None`` without one — what an audit checks, no master key needed."""
    row = raw.execute(sql("SELECT wrapped IS NULL, created_at_us, erased_at_us FROM session_keys WHERE session_id = ?"), (session_id,)).fetchone()
    return None if row is None else (bool(row[0]), row[1], row[2])


def destroy_key_in(raw: Any, sql: Any, session_id: str, now_us: int) -> bool:
    """Destroy the session's data key in the write transaction open on the driver connection
    ``raw`` (``sql``: the backend's placeholder translation): ``wrapped`` and its master key id
    set to NULL, ``erased_at_us`` set — or a tombstone row inserted if the session never had a
    key, so content appended later is refused. Returns whether a key was destroyed."""
    had = raw.execute(sql("SELECT wrapped FROM session_keys WHERE session_id = ?"), (session_id,)).fetchone()
    raw.execute(
        sql(
            "INSERT INTO session_keys (session_id, master_key_id, wrapped, created_at_us, erased_at_us) VALUES (?, NULL, NULL, ?, ?) "
            "ON CONFLICT (session_id) DO UPDATE SET master_key_id = NULL, wrapped = NULL, erased_at_us = excluded.erased_at_us"
        ),
        (session_id, now_us, now_us),
    )
    return had is not None and had[0] is not None


def rewrap_all(db: "Database", master: MasterKeys) -> tuple[int, int]:
    """Wrap every session's data key again under ``master``'s current key (a rotation: after
    it, the older master keys can be removed from the file, and copies of the database taken
    before, with their wrapped keys, open only with those older keys). Erased sessions stay
    erased. One transaction.

    Returns:
        ``(keys rewrapped, keys already under the current master key)``.

    Raises:
        MasterKeyError: a wrapped key names a master key the ring does not hold, or does not open.
    """
    moved = kept = 0
    sql = db.backend.sql
    with db.write() as conn:
        raw = driver_connection(conn)
        rows = raw.execute("SELECT session_id, master_key_id, wrapped FROM session_keys WHERE wrapped IS NOT NULL").fetchall()
        for session_id, key_id, wrapped in rows:
            if key_id == master.current_id:
                kept += 1
                continue
            new_id, new_wrapped = master.wrap(session_id, master.unwrap(session_id, key_id, bytes(wrapped)))
            raw.execute(sql("UPDATE session_keys SET master_key_id = ?, wrapped = ? WHERE session_id = ?"), (new_id, new_wrapped, session_id))
            moved += 1
    return moved, kept
