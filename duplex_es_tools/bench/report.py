"""The benchmark report: the row shape every bench module returns, and the two files written from
the rows (``results.json`` and ``RESULTS.md``).

A row is a plain dict (JSON as is) of this shape::

    {"row": 1, "backend": "sqlite", "measurement": "durable append, one event per command",
     "n": 5000, "events_per_s": 2712.0, "p50_ms": 0.31, "p95_ms": 0.52, "p99_ms": 0.9,
     "target": "≥ 2,500 ev/s, p99 ≤ 2 ms; ≥ 1.4× eventsourcing", "met": True,
     "durability": "SQLite WAL, synchronous=FULL", "ratio_of": "events_per_s",
     "comparisons": [{"name": "eventsourcing 9.5.6 app.save", "events_per_s": 1650.0,
                      "p99_ms": 1.2, "ratio": 1.64}],
     "note": "..."}

``ratio`` is always *ours / theirs* of the figure named by ``ratio_of`` (``events_per_s``: higher
is better, so a ratio above 1 means duplex_es is faster; ``p50_ms`` / ``p99_ms``: lower is better,
so a ratio below 1 means duplex_es is faster). A row that could not be measured has ``met: None``
and says why in ``note`` (see :func:`not_measured`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, TypedDict

__all__ = [
    "Comparison",
    "Row",
    "RatioOf",
    "ratio",
    "comparison",
    "not_measured",
    "build_row",
    "write_report",
    "render_markdown",
    "rows_of",
]

#: Which figure a row's comparison ratios divide.
RatioOf = Literal["events_per_s", "p50_ms", "p95_ms", "p99_ms"]


class Comparison(TypedDict, total=False):
    """One comparison of a row: a peer (``eventsourcing``, a raw driver loop) or another
    measurement of ours (another history length, another mode), measured in the same run.

    Keys: ``name``; any of ``events_per_s`` (ev/s), ``p50_ms``, ``p95_ms``, ``p99_ms`` (ms);
    ``ratio`` (ours / this, of the row's ``ratio_of`` figure); optional ``durability`` when it
    differs from the row's, and ``note``.
    """

    name: str
    events_per_s: Optional[float]
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    ratio: Optional[float]
    durability: str
    note: str


class Row(TypedDict, total=False):
    """One row of the table in issue 6 §3 on one backend.

    Keys: ``row`` (1–15), ``backend`` (``sqlite`` or ``postgresql``; ``none`` for row 13, the
    bare transport ceiling, which logs nothing), ``measurement``, ``n``
    (events or operations measured), ``events_per_s`` (ev/s, or ``None`` for latency rows),
    ``p50_ms`` / ``p95_ms`` / ``p99_ms`` (ms, from an HDR histogram), ``target`` (the issue's
    text), ``met`` (``None``: not measured or not decidable), ``durability`` (the settings the
    figure was measured under), ``ratio_of`` (see the module docstring), ``comparisons`` and
    ``note``.
    """

    row: int
    backend: str
    measurement: str
    n: int
    events_per_s: Optional[float]
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    target: str
    met: Optional[bool]
    durability: str
    ratio_of: str
    comparisons: list[Comparison]
    note: str


def ratio(ours: Optional[float], theirs: Optional[float]) -> Optional[float]:
    """``ours / theirs`` rounded to 2 decimals, or ``None`` when either is missing or zero."""
    if ours is None or theirs is None or not theirs or math.isnan(ours) or math.isnan(theirs):
        return None
    return round(ours / theirs, 2)


def comparison(name: str, figures: dict[str, Any], ours: dict[str, Any], ratio_of: RatioOf, **extra: Any) -> Comparison:
    """A :class:`Comparison` named ``name`` from a peer's ``figures`` (``events_per_s``,
    ``p50_ms``, ...), with ``ratio`` = ``ours[ratio_of] / figures[ratio_of]``."""
    out: Comparison = {"name": name}
    for key in ("events_per_s", "p50_ms", "p95_ms", "p99_ms"):
        if figures.get(key) is not None:
            out[key] = figures[key]  # type: ignore[literal-required]
    out["ratio"] = ratio(ours.get(ratio_of), figures.get(ratio_of))
    out.update(extra)  # type: ignore[typeddict-item]
    return out


def build_row(
    row: int,
    backend: str,
    measurement: str,
    ours: dict[str, Any],
    *,
    n: int,
    target: str,
    met: Optional[bool],
    durability: str,
    ratio_of: RatioOf,
    comparisons: list[Comparison],
    note: str = "",
) -> Row:
    """A measured :class:`Row`: ``ours`` holds ``events_per_s`` (ev/s, may be ``None``) and
    ``p50_ms`` / ``p95_ms`` / ``p99_ms`` (ms)."""
    return {
        "row": row,
        "backend": backend,
        "measurement": measurement,
        "n": n,
        "events_per_s": ours.get("events_per_s"),
        "p50_ms": ours.get("p50_ms"),
        "p95_ms": ours.get("p95_ms"),
        "p99_ms": ours.get("p99_ms"),
        "target": target,
        "met": met,
        "durability": durability,
        "ratio_of": ratio_of,
        "comparisons": comparisons,
        "note": note,
    }


def not_measured(row: int, backend: str, measurement: str, target: str, reason: str) -> Row:
    """A row that could not be measured in this run, with the reason in ``note``."""
    return {
        "row": row,
        "backend": backend,
        "measurement": measurement,
        "n": 0,
        "events_per_s": None,
        "p50_ms": None,
        "p95_ms": None,
        "p99_ms": None,
        "target": target,
        "met": None,
        "durability": "",
        "comparisons": [],
        "note": f"not measured: {reason}",
    }


def write_report(out_dir: Path, results: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``results`` to ``out_dir/results.json`` and its table to ``out_dir/RESULTS.md``;
    returns both paths. ``results`` holds ``machine``, ``settings``, ``rows`` and ``extras``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "RESULTS.md"
    json_path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    md_path.write_text(render_markdown(results))
    return json_path, md_path


# ------------------------------------------------------------------------------------- markdown


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if value < 1 else f"{value:,.{max(digits - 2, 0)}f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _figures(d: dict[str, Any]) -> str:
    parts = []
    if d.get("events_per_s") is not None:
        parts.append(f"{_num(d['events_per_s'])} ev/s")
    pct = [f"{_num(d[k])}" for k in ("p50_ms", "p95_ms", "p99_ms") if d.get(k) is not None]
    if pct:
        parts.append("p50/p95/p99 " + " / ".join(pct) + " ms" if len(pct) == 3 else " / ".join(pct) + " ms")
    return "; ".join(parts) or "—"


def _met(met: Optional[bool]) -> str:
    return {True: "met", False: "**short**", None: "—"}[met]


def _ratio_label(ratio_of: str) -> str:
    return {"events_per_s": "ev/s", "p50_ms": "p50", "p95_ms": "p95", "p99_ms": "p99"}.get(ratio_of, ratio_of)


def _comparisons(row: dict[str, Any]) -> str:
    label = _ratio_label(row.get("ratio_of", "events_per_s"))
    items = []
    for c in row.get("comparisons", []):
        r = c.get("ratio")
        ratio_text = f" → ours/theirs {label} **{r}×**" if r is not None else ""
        items.append(f"{c['name']}: {_figures(c)}{ratio_text}")
    return "<br>".join(items) or "—"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(results: dict[str, Any]) -> str:
    """The Markdown report: machine, durability settings, one table line per row (ours, target,
    met/short, comparisons with ratios, durability), then the shortfalls and the notes."""
    m = results.get("machine", {})
    s = results.get("settings", {})
    fsync = m.get("disk_fdatasync", {})
    lines = [
        "# Benchmark results",
        "",
        f"Measured {results.get('started_at', '?')} by `make bench` (`duplex-es bench"
        f"{' ' + s['argv'] if s.get('argv') else ''}`), {results.get('duration_s', '?')} s in all. "
        "Targets are issue 6 §3's goals for a 2-core machine; the suite reports, it never asserts.",
        "",
        "## Machine",
        "",
        f"- CPUs: {m.get('cpus', '?')} ({m.get('cpu_model', '?')}), memory {m.get('memory_gib', '?')} GiB",
        f"- platform: {m.get('platform', '?')}, Python {m.get('python', '?')}",
        f"- SQLite {m.get('sqlite_version', '?')}; PostgreSQL {m.get('postgresql_version', 'not measured')}",
        f"- disk `fdatasync` of a 4 KiB write in `{fsync.get('folder', '?')}`: p50 {_num(fsync.get('p50_ms'))} ms, "
        f"p99 {_num(fsync.get('p99_ms'))} ms ({fsync.get('n', '?')} calls)",
        f"- durability: SQLite — {m.get('sqlite_durability', '?')}; PostgreSQL — {m.get('postgresql_durability', 'not measured')}",
        f"- load average (1/5/15 min) at the start {m.get('load_average_start')}, at the end {m.get('load_average_end')}"
        " — other work on the machine shows here",
        f"- seed {s.get('seed', '?')}; {'quick run (small n)' if s.get('quick') else 'full run'}",
        "",
        "## Rows",
        "",
        "Ratios are ours / theirs: above 1 is better for ev/s, below 1 is better for latencies.",
        "",
        "| # | backend | measurement | n | ours | target | | comparisons (same run) | durability |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = sorted(results.get("rows", []), key=lambda r: (r.get("row", 99), r.get("backend", "")))
    for r in rows:
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    r.get("row"),
                    r.get("backend"),
                    r.get("measurement"),
                    _num(r.get("n")),
                    _figures(r),
                    r.get("target", ""),
                    _met(r.get("met")),
                    _comparisons(r),
                    r.get("durability", ""),
                )
            )
            + " |"
        )
    short = [r for r in rows if r.get("met") is False]
    lines += ["", "## Short of target", ""]
    if short:
        lines += [f"- row {r['row']} ({r['backend']}): {_figures(r)} against {r.get('target')}" for r in short]
    else:
        lines.append("- none")
    unmeasured = [r for r in rows if r.get("met") is None and r.get("note", "").startswith("not measured")]
    if unmeasured:
        lines += ["", "## Not measured", ""]
        lines += [f"- row {r['row']} ({r['backend']}): {r['note']}" for r in unmeasured]
    lines += ["", "## Notes", ""]
    lines += [f"- row {r['row']} ({r['backend']}): {r['note']}" for r in rows if r.get("note") and r not in unmeasured]
    extras = results.get("extras") or []
    if extras:
        lines += ["", "## Other figures (outside issue 6's table)", "", "| measurement | backend | n | figures | note |", "|---|---|---|---|---|"]
        for e in extras:
            lines.append(
                f"| {_cell(e.get('measurement'))} | {_cell(e.get('backend', ''))} | {_num(e.get('n'))} | {_cell(_figures(e))} | {_cell(e.get('note', ''))} |"
            )
    lines.append("")
    return "\n".join(lines)


def rows_of(results: dict[str, Any], numbers: Iterable[int]) -> list[Row]:
    """The rows of ``results`` whose number is in ``numbers`` (for tests and tools)."""
    wanted = set(numbers)
    return [r for r in results.get("rows", []) if r.get("row") in wanted]
