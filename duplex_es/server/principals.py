"""Who a request speaks for: API keys, each a named principal with a role.

``serve --api-keys FILE`` reads a JSON list of keys (docs/security.md, "Principals, ownership
and resume tokens")::

    [{"name": "alice", "key": "…", "role": "client"},
     {"name": "ops", "key": "…", "role": "operator"},
     {"name": "clinic", "key": "…", "role": "client", "retain_days": 30}]

``retain_days`` (optional, a number > 0) is how long the sessions a principal opens are kept
after they end before their content is erased (``serve --retain-days`` for everyone else;
docs/privacy.md, "Retention").

A session belongs to the principal that opened it. A ``client`` reads and resumes only its own
sessions; an ``operator`` may also read anyone's (``GET /v1/sessions/{id}``) but resumes only
its own. ``--api-key K`` is one operator principal named ``default``; with no key at all every
request is :data:`ANONYMOUS`, and sessions have no owner (the local default).

Keys are compared as SHA-256 digests with :func:`hmac.compare_digest`, against every key, so
neither the time nor the key's length tells a guesser how close it came.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Mapping, Optional, Sequence

import attrs

__all__ = ["ANONYMOUS", "Keyring", "KeysFileError", "Principal", "ROLES"]

#: The roles a key may have.
ROLES = ("client", "operator")

#: A principal's name: it is logged in each session it opens, so keep it short and plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


class KeysFileError(ValueError):
    """The API keys file cannot be used; the message names the file and the entry."""


@attrs.frozen
class Principal:
    """Who a request speaks for: ``name`` (``None``: anonymous, no keys configured) and
    ``role`` (``"client"`` or ``"operator"``). Never holds the key."""

    name: Optional[str]
    role: str = "client"
    #: days its ended sessions are kept before retention erases them (``None``: the server's
    #: ``--retain-days``)
    retain_days: Optional[float] = None

    @property
    def operator(self) -> bool:
        """May read every principal's sessions."""
        return self.role == "operator"

    def owns(self, owner: Optional[str]) -> bool:
        """Whether this principal may resume (and read) a session whose log names ``owner``.
        A session with no owner was opened with no keys configured (or before principals
        existed): anyone the server lets in may use it, as before."""
        return owner is None or owner == self.name

    def may_read(self, owner: Optional[str]) -> bool:
        """Whether this principal may read a session whose log names ``owner``."""
        return self.operator or self.owns(owner)


#: The principal of every request on a server with no keys.
ANONYMOUS = Principal(name=None, role="operator")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen
class Keyring:
    """The server's API keys. An empty keyring lets everyone in as :data:`ANONYMOUS`."""

    entries: tuple[tuple[bytes, Principal], ...] = ()

    @property
    def open(self) -> bool:
        """No keys: every request is anonymous."""
        return not self.entries

    @classmethod
    def single(cls, key: str) -> "Keyring":
        """``--api-key K``: one operator principal named ``default``.

        Raises:
            KeysFileError: the key is empty or holds whitespace.
        """
        _check_key(key, "--api-key")
        return cls(((_digest(key), Principal("default", "operator")),))

    @classmethod
    def from_entries(cls, entries: object, source: str = "the API keys") -> "Keyring":
        """A keyring from parsed JSON: a non-empty list of ``{"name", "key", "role"}``.

        Raises:
            KeysFileError: not such a list, an entry with a missing, extra or bad field
                (empty key, unknown role, bad name), or a name or key given twice; the message
                names ``source`` and the entry (by name, else by position), never a key.
        """
        if not isinstance(entries, list) or not entries:
            raise KeysFileError(f"{source}: expected a non-empty JSON list of {{\"name\", \"key\", \"role\"}} objects")
        names: set[str] = set()
        digests: dict[bytes, str] = {}
        out = []
        for i, entry in enumerate(entries):
            where = f"{source}: entry {i}"
            if not isinstance(entry, dict):
                raise KeysFileError(f"{where}: expected an object with name, key and role")
            if isinstance(entry.get("name"), str):
                where = f"{source}: entry {i} ({entry['name'][:64]!r})"
            fields = set(entry) - {"retain_days"}
            if fields != {"name", "key", "role"}:
                missing, extra = sorted({"name", "key", "role"} - fields), sorted(fields - {"name", "key", "role"})
                raise KeysFileError(f"{where}: " + "; ".join(
                    ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown field {', '.join(map(str, extra))}"] if extra else [])
                ))
            name, key, role = entry["name"], entry["key"], entry["role"]
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise KeysFileError(f"{where}: name must be 1-64 letters, digits or _.@- (starting with a letter or digit)")
            if role not in ROLES:
                raise KeysFileError(f"{where}: role must be one of {', '.join(ROLES)}; got {str(role)[:32]!r}")
            _check_key(key, where)
            retain = entry.get("retain_days")
            if retain is not None and (isinstance(retain, bool) or not isinstance(retain, (int, float)) or not 0 < retain <= 36_500):
                raise KeysFileError(f"{where}: retain_days must be a number of days above 0 and at most 36500; got {str(retain)[:32]!r}")
            if name in names:
                raise KeysFileError(f"{where}: the name {name!r} is given twice")
            digest = _digest(key)
            if digest in digests:
                raise KeysFileError(f"{where}: the same key as {digests[digest]!r}")
            names.add(name)
            digests[digest] = name
            out.append((digest, Principal(name, role, None if retain is None else float(retain))))
        return cls(tuple(out))

    def retention(self) -> dict[str, float]:
        """``{principal name: retain_days}`` of the keys that set one."""
        return {p.name: p.retain_days for _, p in self.entries if p.name is not None and p.retain_days is not None}

    @classmethod
    def load(cls, path: str | Path) -> "Keyring":
        """Read ``serve --api-keys FILE`` (see :meth:`from_entries`).

        Raises:
            KeysFileError: the file cannot be read, is not JSON, or is not a valid key list.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise KeysFileError(f"{path}: cannot read: {err}") from err
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:
            raise KeysFileError(f"{path}: not JSON: {err}") from err
        return cls.from_entries(parsed, str(path))

    def names(self) -> Sequence[str]:
        """The principals' names, in file order."""
        return [p.name for _, p in self.entries if p.name is not None]

    def authenticate(self, headers: Mapping[str, str]) -> Optional[Principal]:
        """The principal an ``Authorization: Bearer <key>`` header names; :data:`ANONYMOUS`
        when there are no keys; ``None`` for a missing or unknown key."""
        if self.open:
            return ANONYMOUS
        header = headers.get("authorization") or ""
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented:
            return None
        digest = _digest(presented.strip())
        found: Optional[Principal] = None
        for known, principal in self.entries:  # every key, whichever matches
            if hmac.compare_digest(digest, known):
                found = principal
        return found


def _check_key(key: object, where: str) -> None:
    if not isinstance(key, str):
        raise KeysFileError(f"{where}: the key must be a JSON string, not {type(key).__name__}")
    if not key:
        raise KeysFileError(f"{where}: the key is empty")
    if key != key.strip() or any(c.isspace() for c in key):
        raise KeysFileError(f"{where}: the key holds whitespace (it must fit in an Authorization: Bearer header)")
    if any(not 0x21 <= ord(c) <= 0x7E for c in key):
        # An HTTP header value carries visible ASCII only (RFC 9110, field values); a key with
        # anything else could never be sent, so it is a mistake in the file.
        raise KeysFileError(f"{where}: the key holds a character other than visible ASCII (it must fit in an Authorization: Bearer header)")
