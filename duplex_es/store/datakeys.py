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
    "SEALED_V1",
    "MASTER_KEY_BYTES",
    "MasterKeyError",
    "SealError",
    "SessionErased",
    "MasterKeys",
    "DataKeys",
    "seal",
    "open_sealed",
    "audio_length",
    "destroy_key_in",
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


class SessionErased(LogError):
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


#: What :meth:`DataKeys.cipher` caches for an erased session.
_ERASED = object()


class DataKeys:
    """The data keys of the sessions one process reads and writes, unwrapped once and cached.

    Thread-safe (the server's writer, readers in threads and the inspector share one).

    Args:
        master: the master key ring.
        db: the database (its backend's placeholders for the driver-level statements, and a
            read connection when a reader needs a key it has not cached).
    """

    def __init__(self, master: MasterKeys, db: "Database") -> None:
        self.master = master
        self.db = db
        self._sql = db.backend.sql
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _from_row(self, session_id: str, key_id: Optional[str], wrapped: Optional[bytes]) -> Any:
        if wrapped is None:
            return _ERASED
        return AESGCM(self.master.unwrap(session_id, key_id or "", bytes(wrapped)))

    def for_write(self, raw: Any, session_ids: Sequence[str], now_us: int) -> dict[str, Optional[AESGCM]]:
        """Each session's cipher for appending sealed rows, in the write transaction open on
        the driver connection ``raw``: loaded (and cached), or created and inserted for a
        session that has none yet. ``None`` for an erased session.

        Raises:
            MasterKeyError: a stored key does not unwrap.
        """
        out: dict[str, Optional[AESGCM]] = {}
        missing = []
        with self._lock:
            for sid in session_ids:
                got = self._cache.get(sid)
                if got is None:
                    missing.append(sid)
                else:
                    out[sid] = None if got is _ERASED else got
        if not missing:
            return out
        found = self._select(raw, missing)
        for sid in missing:
            if sid not in found:
                data_key = AESGCM.generate_key(bit_length=256)
                key_id, wrapped = self.master.wrap(sid, data_key)
                # ON CONFLICT: another process (a worker appending an output) may create the
                # session's key at the same moment; whichever commits first is the key.
                raw.execute(
                    self._sql(
                        "INSERT INTO session_keys (session_id, master_key_id, wrapped, created_at_us) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (session_id) DO NOTHING"
                    ),
                    (sid, key_id, wrapped, now_us),
                )
        if any(sid not in found for sid in missing):
            found.update(self._select(raw, [s for s in missing if s not in found]))
        with self._lock:
            for sid in missing:
                key_id, wrapped = found[sid]
                cipher = self._cache[sid] = self._from_row(sid, key_id, wrapped)
                out[sid] = None if cipher is _ERASED else cipher
        return out

    def _select(self, raw: Any, session_ids: Sequence[str]) -> dict[str, tuple[Optional[str], Optional[bytes]]]:
        marks = ", ".join("?" * len(session_ids))
        rows = raw.execute(
            self._sql(f"SELECT session_id, master_key_id, wrapped FROM session_keys WHERE session_id IN ({marks})"), tuple(session_ids)
        ).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def for_read(self, session_id: str) -> Optional[AESGCM]:
        """The session's cipher for reading (cached), or ``None``: no key (erased, or never
        created) — its sealed content reads as erased.

        Raises:
            MasterKeyError: the stored key does not unwrap.
        """
        with self._lock:
            got = self._cache.get(session_id)
        if got is None:
            with self.db.read() as conn:
                row = self._select(driver_connection(conn), [session_id]).get(session_id)
            got = _ERASED if row is None else self._from_row(session_id, *row)
            if row is not None:  # a session without a key row may get one later: not cached
                with self._lock:
                    self._cache[session_id] = got
        return None if got is _ERASED else got

    def forget(self, session_id: str) -> None:
        """Drop the session's cached key (after an erasure, here or elsewhere)."""
        with self._lock:
            self._cache.pop(session_id, None)


def decode_stored(
    keys: Optional[DataKeys], session_id: str, seq: int, type_: str, version: int, data: str, payload: Optional[bytes], sealed: Optional[int]
) -> tuple[Event, bool]:
    """A stored row's event, and whether its content was *withheld* (sealed and not opened:
    the session was erased, or this reader holds no master key — it reads as
    :func:`~duplex_es.events.codec.decode_sealed` says).

    Raises:
        SealError: a sealed payload that does not open for this row (tampered or moved).
        MasterKeyError: the session's wrapped key does not unwrap.
        EventDecodeError: the row does not decode; a ``sealed`` format this code does not know.
    """
    if sealed is None:
        return decode(type_, version, data, payload), False
    if sealed != SEALED_V1 or payload is None:
        raise EventDecodeError(type_, version, "bad_data", f"(sealed={sealed!r} with {'no' if payload is None else 'a'} payload: not a format this code reads)")
    cipher = keys.for_read(session_id) if keys is not None else None
    if cipher is None:
        return decode_sealed(type_, version, data, None, audio_length(payload)), True
    return decode_sealed(type_, version, data, open_sealed(cipher, session_id, seq, type_, version, payload)), False


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
