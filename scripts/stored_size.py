"""The stored size of the recorded corpus's sessions (tests/corpus), as the log keeps them today
(``encode_row``: audio as bytes in ``payload``) against everything in the JSON (``encode``, how
rows were stored before migration 0005): the bytes of ``data`` (UTF-8) plus ``payload`` per
session. docs/performance.md, "Audio as bytes".

    .venv/bin/python scripts/stored_size.py
"""

from __future__ import annotations

import json
from pathlib import Path

from duplex_es.events import decode, encode
from duplex_es.events.codec import encode_row

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"


def main() -> None:
    for path in sorted(CORPUS.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        events = [decode(r["type"], r["version"], json.dumps(r["event"])) for r in rows]
        inline = sum(len(encode(ev)[2].encode()) for ev in events)
        stored = 0
        for ev in events:
            _, _, data, payload = encode_row(ev)
            stored += len(data.encode()) + (len(payload) if payload is not None else 0)
        print(f"{path.stem:<14} {len(events):>4} events  {inline / 1e3:9.1f} kB in JSON  {stored / 1e3:9.1f} kB as stored  ({stored / inline:.2f}×)")


if __name__ == "__main__":
    main()
