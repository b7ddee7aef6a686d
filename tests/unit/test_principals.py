"""API keys and principals (duplex_es/server/principals.py), the failed-resume throttle
(duplex_es/server/throttle.py) and ``serve``'s refusal to run keyless on a reachable address."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplex_es.cli.arguments import CliError
from duplex_es.cli.main import _keyring, build_parser
from duplex_es.server.principals import ANONYMOUS, Keyring, KeysFileError, Principal
from duplex_es.server.throttle import ResumeThrottle, Throttled

KEYS = [
    {"name": "alice", "key": "alice-key-0123456789", "role": "client"},
    {"name": "ops", "key": "ops-key-0123456789", "role": "operator"},
]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_each_key_names_its_principal_and_unknown_keys_none():
    ring = Keyring.from_entries(KEYS)
    assert ring.authenticate(bearer("alice-key-0123456789")) == Principal("alice", "client")
    assert ring.authenticate(bearer("ops-key-0123456789")) == Principal("ops", "operator")
    for headers in ({}, bearer("alice-key-012345678"), bearer("alice-key-01234567890"), {"authorization": "alice-key-0123456789"}):
        assert ring.authenticate(headers) is None
    assert Keyring().authenticate({}) is ANONYMOUS


def test_single_key_is_one_operator_named_default():
    assert Keyring.single("sekrit").authenticate(bearer("sekrit")) == Principal("default", "operator")


def test_ownership_rules():
    alice, ops = Principal("alice", "client"), Principal("ops", "operator")
    assert alice.owns("alice") and alice.owns(None) and not alice.owns("bob")
    assert ops.may_read("bob") and not ops.owns("bob")
    assert not alice.may_read("bob")


@pytest.mark.parametrize(
    "entries, says",
    [
        ({"name": "a"}, "non-empty JSON list"),
        ([], "non-empty JSON list"),
        (["x"], "entry 0: expected an object"),
        ([{"name": "a", "key": "k1", "role": "client"}, {"name": "a", "key": "k2", "role": "client"}], "entry 1 ('a'): the name 'a' is given twice"),
        ([{"name": "a", "key": "k1", "role": "client"}, {"name": "b", "key": "k1", "role": "client"}], "entry 1 ('b'): the same key as 'a'"),
        ([{"name": "a", "key": "", "role": "client"}], "entry 0 ('a'): the key is empty"),
        ([{"name": "a", "key": "k 1", "role": "client"}], "holds whitespace"),
        ([{"name": "a", "key": 123, "role": "client"}], "the key must be a JSON string, not int"),
        ([{"name": "a", "key": "x\u0000", "role": "client"}], "other than visible ASCII"),
        ([{"name": "a", "key": "k1", "role": "admin"}], "role must be one of client, operator; got 'admin'"),
        ([{"name": "a", "key": "k1"}], "entry 0 ('a'): missing role"),
        ([{"name": "a", "key": "k1", "role": "client", "extra": 1}], "unknown field extra"),
        ([{"name": "", "key": "k1", "role": "client"}], "name must be"),
    ],
)
def test_a_bad_keys_list_is_refused_naming_the_entry_and_never_the_key(entries, says):
    with pytest.raises(KeysFileError) as err:
        Keyring.from_entries(entries, "keys.json")
    assert says in str(err.value) and str(err.value).startswith("keys.json")
    keys = [e["key"] for e in entries if isinstance(e, dict) and e.get("key")] if isinstance(entries, list) else []
    assert not any(str(k) in str(err.value) for k in keys if isinstance(k, str))


def test_a_keys_file_that_is_not_json_is_refused(tmp_path: Path):
    path = tmp_path / "keys.json"
    path.write_text("[{name: alice}]")
    with pytest.raises(KeysFileError, match="keys.json: not JSON"):
        Keyring.load(path)
    path.write_text(json.dumps(KEYS))
    assert Keyring.load(path).names() == ["alice", "ops"]


def serve_args(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["serve", *argv])


def test_serve_refuses_no_keys_on_a_reachable_address_unless_told(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DUPLEX_ES_API_KEY", raising=False)
    for host in ("0.0.0.0", "192.0.2.7", "::", "example.com"):
        with pytest.raises(CliError, match=f"--host {host} is reachable from other machines, but no --api-key"):
            _keyring(serve_args("--host", host))
        assert _keyring(serve_args("--host", host, "--allow-unauthenticated")).open
        assert not _keyring(serve_args("--host", host, "--api-key", "k")).open
    for host in ("127.0.0.1", "127.0.0.2", "127.1", "::1", "localhost"):
        assert _keyring(serve_args("--host", host)).open
    assert _keyring(serve_args()).open  # the default --host is loopback
    with pytest.raises(CliError, match="not both"):
        _keyring(serve_args("--api-key", "k", "--api-keys", "f.json"))
    with pytest.raises(KeysFileError, match="--api-key: the key is empty"):
        _keyring(serve_args("--api-key", ""))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_refuses_a_session_for_at_most_one_window_after_its_last_counted_failure():
    clock = Clock()
    t = ResumeThrottle(1_000, per_session=3, per_source=100, per_connection=100, clock=clock)
    for i in range(3):
        t.check("s", "p", 0)
        t.failed("s", "p")
        clock.now += 100
    with pytest.raises(Throttled) as throttled:
        t.check("s", "p", 0)
    assert throttled.value.scope == "session" and throttled.value.retry_after_ms == 701
    t.check("other", "p", 0)  # other sessions are not affected
    # Hammering while throttled counts nothing: the lock ends a window after the first failure.
    for _ in range(50):
        with pytest.raises(Throttled):
            t.check("s", "p", 0)
    clock.now = 1_001
    t.check("s", "p", 0)


def test_the_throttle_counts_per_source_and_per_connection():
    clock = Clock()
    t = ResumeThrottle(1_000, per_session=100, per_source=5, per_connection=2, clock=clock)
    with pytest.raises(Throttled) as throttled:
        t.check("s", "p", 2)
    assert throttled.value.scope == "connection" and throttled.value.retry_after_ms is None
    for i in range(5):
        t.failed(None, "p")  # ids nobody may see count against the source only
    with pytest.raises(Throttled, match="source"):
        t.check(f"s{i}", "p", 0)
    t.check("s", "q", 0)
    assert ("s", None) not in t._failures
