"""Remake the recorded sessions ``make test`` rechecks (``tests/corpus/*.jsonl``): real
``serve`` and ``worker`` processes on a new SQLite file, the scripted sessions of
:mod:`duplex_es_tools.corpus` over real WebSockets with the shared speech fixtures, each
session exported as JSON Lines. About 30 s (the full-duplex sessions stream at real time).

    .venv/bin/python scripts/make_corpus.py [NAME ...]     # default: every session

Run it when a rule changes on purpose (``replay --recheck`` then fails on the corpus): review
the diff of ``tests/corpus`` (``duplex-es replay --recheck`` on the old files names what
changed) and commit the new files with the rule change (docs/replay.md, "Rechecking history").
"""

from __future__ import annotations

import sys
from pathlib import Path

from duplex_es_tools.corpus import make_corpus

if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "tests" / "corpus"
    written = make_corpus(out, only=sys.argv[1:] or None)
    for name, (session_id, size) in written.items():
        print(f"{out / (name + '.jsonl')}: {session_id}, {size} bytes")
    print(f"total: {sum(size for _, size in written.values())} bytes")
