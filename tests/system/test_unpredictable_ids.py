"""A client cannot predict the ids a real server hands out (issue 12, item 2).

The attack (tests/mersenne.py) predicts every later id of the seeded ``random.Random`` ids once
came from (shown in tests/unit/test_id_attack.py). Here it is fed a stream of ids a client collects
from a quiet server — the ``event_id`` of 400 ``error`` replies in a row, then session, item and
response ids — and must predict none of the ids that follow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from websockets.sync.client import connect

from mersenne import predict_next_ids
from servers import running
from wsclient import WsClient


def errors_before_start(port: int, count: int) -> list[str]:
    """The ``event_id`` of the ``error`` each of ``count`` messages sent before
    ``session.start`` gets on ``/v1/world`` (the server makes one fresh id for each)."""
    ws = connect(f"ws://127.0.0.1:{port}/v1/world")
    ids = []
    for i in range(count):
        ws.send(json.dumps({"type": "session.interaction", "event_id": i + 1}))
        reply = json.loads(ws.recv(timeout=10))
        assert reply["type"] == "error"
        ids.append(reply["event_id"])
    ws.close()
    return ids


def test_ids_a_client_sees_cannot_be_predicted_from_earlier_ones(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with running(url, tmp_path, workers=0) as (port, _, _):
        seen = errors_before_start(port, 400)
        later = errors_before_start(port, 100)
        sessions, items = [], []
        for _ in range(10):
            c = WsClient(port)
            sessions.append(c.session_id)
            c.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
            items.append(c.recv("conversation.item.added")["item"]["id"])
            c.close()
    predicted = predict_next_ids(seen, 1000)
    assert predicted is not None and len(set(seen)) == len(seen)
    tails = {i.rpartition("_")[2] for i in later + sessions + items}
    assert not tails & set(predicted)
    # Nor does a counter show through: consecutive ids share no long prefix.
    stream = [i.rpartition("_")[2] for i in seen + later]
    assert max(len(os.path.commonprefix([a, b])) for a, b in zip(stream, stream[1:])) < 8
