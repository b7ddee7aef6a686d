"""One session's inspector view as one self-contained HTML file (``duplex-es inspect SESSION
--out FILE.html``): the UI's HTML, CSS and JS inlined, and the data it would fetch inlined as
``window.INSPECTOR_EXPORT``, audio as ``data:audio/wav`` URIs and world frames as ``data:image``
URIs. It opens from disk (``file://``) with nothing else.

Bounded (docs/inspector.md, "Exporting"): the user's audio up to :data:`MAX_AUDIO_MS`, each
response's audio, the first :data:`MAX_EVENTS` event rows, the state after up to
:data:`MAX_STATES` events (every event that is not an input append, evenly thinned beyond that
or beyond :data:`MAX_STATE_BYTES` of JSON)
and the frames of the first :data:`MAX_CHUNKS` world chunks; what was left out is named in the
page's notice.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from duplex_es.inspect.lanes import MAX_BUCKETS
from duplex_es.inspect.service import MAX_EVENTS_PAGE, Inspector
from duplex_es.inspect.web import static_text

__all__ = ["MAX_AUDIO_MS", "MAX_CHUNKS", "MAX_EVENTS", "MAX_STATES", "MAX_STATE_BYTES", "export_data", "export_html"]

#: The user audio an export holds (ms from the start): 10 minutes (28.8 MB of WAV at 24 kHz).
MAX_AUDIO_MS = 600_000
#: Event rows an export holds.
MAX_EVENTS = 20_000
#: States (after chosen events) an export holds, at most, and the bytes of JSON they may take.
MAX_STATES = 400
MAX_STATE_BYTES = 32_000_000
#: World chunks whose frames an export holds.
MAX_CHUNKS = 100
#: Waveform buckets per lane in an export (the page cannot ask for finer ones).
_BUCKETS = MAX_BUCKETS


def _wav_uri(data: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(data).decode("ascii")


def export_data(inspector: Inspector, session_id: str) -> dict[str, Any]:
    """What the exported page reads instead of the HTTP API (see the module docstring).

    Raises:
        InspectError: ``session_not_found``.
    """
    ov = inspector.overview(session_id)
    tl = inspector.timeline(session_id)
    notes = []
    row = next((r for r in inspector.sessions(text=session_id) if r["id"] == session_id), None)
    audit = inspector.audit(session_id)
    if row is not None:
        row["audit"] = audit
    peaks: dict[str, Any] = {}
    audio: dict[str, Any] = {}
    for name, lane in tl.lanes.items():
        if not lane.samples:
            continue
        peaks[name] = inspector.peaks(session_id, name, 0, max(1, lane.ms), min(_BUCKETS, max(1, lane.ms)))
        to_ms = None if lane.ms <= MAX_AUDIO_MS else MAX_AUDIO_MS
        if to_ms is not None:
            notes.append(f"{name} audio: the first {MAX_AUDIO_MS // 60000} min of {lane.ms // 60000} min are included")
        audio[name] = {"url": _wav_uri(inspector.wav(session_id, name, 0, to_ms)), "from_ms": 0}
    events: list[dict[str, Any]] = []
    seq = 1
    while seq <= min(ov["head"], MAX_EVENTS):
        page = inspector.events(session_id, seq, min(MAX_EVENTS_PAGE, MAX_EVENTS - seq + 1))["rows"]
        events.extend(page)
        seq = page[-1]["seq"] + 1
    if ov["head"] > MAX_EVENTS:
        notes.append(f"events: the first {MAX_EVENTS} of {ov['head']} are included")
    wanted = [m[0] for m in ov["markers"]] or [ov["head"]]
    # A state holds every item's audio segments, so it grows with the session: the last one,
    # the largest, sets how many fit in the budget.
    last = len(json.dumps(inspector.states_at(session_id, [wanted[-1]])[wanted[-1]]["state"]))
    room = max(1, min(MAX_STATES, MAX_STATE_BYTES // max(1, last)))
    if len(wanted) > room:
        step = len(wanted) / room
        wanted = sorted({wanted[int(i * step)] for i in range(room - 1)} | {wanted[-1]})
        notes.append(f"states: after {len(wanted)} of the {len(ov['markers'])} events that are not input appends")
    rows = {r["seq"]: r for r in events}
    states = inspector.states_at(session_id, wanted)
    for seq, st in states.items():
        st["event"] = rows[seq] if seq in rows else inspector.events(session_id, seq, 1)["rows"][0]
    frames: dict[int, list[str]] = {}
    if ov["world"] is not None:
        for chunk in ov["world"]["chunks"][:MAX_CHUNKS]:
            frames[chunk["seq"]] = [
                f"data:{mime};base64," + base64.b64encode(data).decode("ascii")
                for data, mime in (inspector.frame(session_id, chunk["seq"], i) for i in range(chunk["frames"]))
            ]
        if len(ov["world"]["chunks"]) > MAX_CHUNKS:
            notes.append(f"frames: of the first {MAX_CHUNKS} of {len(ov['world']['chunks'])} chunks")
    return {
        "row": row, "overview": ov, "audit": audit, "peaks": peaks, "audio": audio, "events": events,
        "state_seqs": sorted(states), "states": states, "frames": frames,
        "note": "exported file" + ("; " + "; ".join(notes) if notes else ""),
    }


def _script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def export_html(inspector: Inspector, session_id: str) -> str:
    """The self-contained HTML page of one session (module docstring).

    Raises:
        InspectError: ``session_not_found``.
    """
    data = export_data(inspector, session_id)
    html = static_text("index.html")
    css = static_text("inspector.css")
    js = static_text("inspector.js").replace("</script", "<\\/script")
    html = html.replace('<link rel="stylesheet" href="static/inspector.css">', f"<style>\n{css}</style>")
    return html.replace(
        '<script src="static/inspector.js"></script>',
        f"<script>window.INSPECTOR_EXPORT = {_script_json(data)};</script>\n<script>\n{js}</script>",
    )
