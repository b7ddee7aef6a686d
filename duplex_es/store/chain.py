"""The per-session hash chain (docs/architecture.md, I9), keyed when a chain key is configured.

Each event's hash covers the previous event's hash and everything stored about the event, so an
edit, a deletion or a reordering anywhere in a session breaks every hash after it. That alone
only detects changes made by someone who does not recompute the chain: the formula is public.
With a chain key (a secret kept outside the database, docs/security.md, "Tamper evidence") each
event's stored hash is instead an HMAC-SHA256 under the key of the same fields, and the event's
``key_id`` column names the key, so an attacker who can write the database but not read the key
cannot produce hashes that verify. The MAC also covers the key id, and is computed
in one pass over the event from a copy of the key's precomputed HMAC state, so signing costs
about what the unkeyed SHA-256 costs.

A key file is a key ring: one hex-encoded key per line (``#`` starts a comment), the first the
key new events are signed with, the others older keys kept so the events they signed still
verify after a rotation.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Mapping, Optional

import attrs

from duplex_es.errors import LogError

__all__ = [
    "GENESIS",
    "KEY_BYTES",
    "ChainKeyError",
    "KeyRing",
    "event_hash",
    "key_id_of",
    "new_key_line",
    "read_key_file",
]

#: ``prev_hash`` of a session's first event.
GENESIS = "0" * 64

#: Bytes of a generated chain key (and the fewest a key file may hold per key).
KEY_BYTES = 32


class ChainKeyError(LogError):
    """A chain key file is missing, unreadable or malformed (the message names the file and line)."""


def _version_field(version: int, sealed: Optional[int]) -> str:
    # A sealed row's format joins its version ("1/sealed1"): an unsealed row's version is a bare
    # integer, so clearing the column (to have the ciphertext read as audio) changes the hash.
    return f"{version}" if sealed is None else f"{version}/sealed{sealed}"


def event_hash(
    prev_hash: str,
    session_id: str,
    seq: int,
    type_: str,
    version: int,
    data: str,
    recorded_at_us: int,
    payload: Optional[bytes] = None,
    sealed: Optional[int] = None,
) -> str:
    """SHA-256 (hex) of one event chained to ``prev_hash``: the unkeyed chain.

    The fields are joined with a separator that cannot occur in the first five (ids, integers
    and wire names have no NUL), so two different events never produce the same input. A row's
    ``payload`` (its audio as bytes, :func:`duplex_es.events.codec.encode_row`) follows the
    JSON after a NUL, which JSON text never holds (control characters are escaped); a row
    without one hashes as every row did before the payload column. A sealed row
    (``sealed``: its format, docs/privacy.md) hashes its version as ``"1/sealed1"``, and its
    payload is the ciphertext: the chain verifies without any data key, erased or not.
    """
    h = hashlib.sha256()
    h.update(f"{prev_hash}\0{session_id}\0{seq}\0{type_}\0{_version_field(version, sealed)}\0{recorded_at_us}\0".encode())
    h.update(data.encode())
    if payload is not None:
        h.update(b"\0")
        h.update(payload)
    return h.hexdigest()


def read_key_file(path: str | os.PathLike[str], what: str, min_bytes: int, error: type[Exception], hint: str, max_bytes: Optional[int] = None) -> list[bytes]:
    """The keys of a key file: one hex key per line, ``#`` comments and blank lines skipped, in
    file order (the first is the one in use).

    Raises:
        error: the file cannot be read, holds no key, or a line is not a hex key of
            ``min_bytes`` (to ``max_bytes``) bytes — named by line number, never by content.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{what} file {p}: cannot read it: {exc}") from exc
    keys: list[bytes] = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            key = bytes.fromhex(line)
        except ValueError:
            raise error(f"{what} file {p}, line {n}: not a hex key") from None
        if len(key) < min_bytes or (max_bytes is not None and len(key) > max_bytes):
            size = f"{min_bytes}" if max_bytes == min_bytes else f"at least {min_bytes}"
            raise error(f"{what} file {p}, line {n}: {len(key)} bytes; a {what} needs {size}")
        keys.append(key)
    if not keys:
        raise error(f"{what} file {p}: no key in it (one hex key per line; {hint})")
    return keys


def key_id_of(key: bytes) -> str:
    """A key's public name: the first 8 hex digits of its SHA-256 (never the key itself)."""
    return hashlib.sha256(key).hexdigest()[:8]


def new_key_line() -> str:
    """A fresh random key (:data:`KEY_BYTES` from the OS), hex-encoded, as a key file line."""
    return secrets.token_hex(KEY_BYTES)


@attrs.frozen
class KeyRing:
    """The chain keys of one deployment: ``signing_id`` signs new events, every key in ``keys``
    (by key id) verifies the events it signed."""

    signing_id: str
    keys: Mapping[str, bytes] = attrs.field(repr=False)  # never printed
    # Each key's HMAC state after absorbing the key, copied per event instead of rebuilt.
    _macs: Mapping[str, "hmac.HMAC"] = attrs.field(init=False, repr=False, eq=False)

    @_macs.default
    def _start_macs(self) -> Mapping[str, "hmac.HMAC"]:
        return {kid: hmac.new(key, digestmod="sha256") for kid, key in self.keys.items()}

    def sign(
        self,
        key_id: str,
        prev_hash: str,
        session_id: str,
        seq: int,
        type_: str,
        version: int,
        data: str,
        recorded_at_us: int,
        payload: Optional[bytes] = None,
        sealed: Optional[int] = None,
    ) -> Optional[str]:
        """The stored hash of a keyed event: HMAC-SHA256 (hex, 64 chars) under key ``key_id``
        of the key id and the fields :func:`event_hash` covers (the payload as there);
        ``None`` if this ring does not hold that key."""
        start = self._macs.get(key_id)
        if start is None:
            return None
        h = start.copy()
        h.update(f"{key_id}\0{prev_hash}\0{session_id}\0{seq}\0{type_}\0{_version_field(version, sealed)}\0{recorded_at_us}\0".encode())
        h.update(data.encode())
        if payload is not None:
            h.update(b"\0")
            h.update(payload)
        return h.hexdigest()

    @property
    def signing_key(self) -> bytes:
        """The key new events are signed with."""
        return self.keys[self.signing_id]

    def get(self, key_id: str) -> Optional[bytes]:
        """The key with ``key_id``, or ``None`` if this ring does not hold it."""
        return self.keys.get(key_id)

    @classmethod
    def from_keys(cls, keys: list[bytes]) -> "KeyRing":
        """A ring of raw keys, the first signing.

        Raises:
            ChainKeyError: no keys, or a key shorter than :data:`KEY_BYTES`.
        """
        if not keys:
            raise ChainKeyError("a chain key ring needs at least one key")
        for k in keys:
            if len(k) < KEY_BYTES:
                raise ChainKeyError(f"a chain key must be at least {KEY_BYTES} bytes, got {len(k)}")
        return cls(key_id_of(keys[0]), {key_id_of(k): k for k in keys})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "KeyRing":
        """Read a key file: one key per line in hex (at least ``2 * KEY_BYTES`` digits), the
        first signing; blank lines and ``#`` comments are skipped.

        Raises:
            ChainKeyError: the file cannot be read, holds no key, or a line is not a hex key
                long enough (named by line number, never by content).
        """
        return cls.from_keys(read_key_file(path, "chain key", KEY_BYTES, ChainKeyError, f"`duplex-es chain-key new {path}` makes one"))
