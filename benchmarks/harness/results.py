"""The suite's output: one printed table, and OUT/<date>_<device>.{csv,json} plus OUT/latest.{csv,json}."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness.rows import Row
from brnn_core.fileio import atomic_write

CSV_FIELDS = ["bench", "case", "metric", "value", "unit", "lo", "hi", "spread_pct", "reps", "target", "met", "note"]
META_IN_CSV = ["date", "device", "device_name", "cpu", "cores", "threads", "torch"]


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if a >= 1 else f"{value:.3f}"


def format_table(rows: list[Row], meta: dict) -> str:
    head = ["bench", "case", "metric", "value", "unit", "range (min-max)", "spread", "n", "target", "note"]
    body = [[r.bench, r.case, r.metric, _fmt(r.value), r.unit,
             f"{_fmt(r.lo)} - {_fmt(r.hi)}" if r.lo is not None and r.hi is not None else "",
             "" if r.spread is None else f"{r.spread:.0f}%{' !' if r.spread > 20 else ''}", str(r.reps),
             f"{r.target} {'ok' if r.met == 'yes' else 'MISSED'}" if r.target else "", r.note] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body, strict=False)]
    widths[-1] = len(head[-1])  # the note runs on freely
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()  # noqa: E731
    out = [f"benchmarks, {meta['date']}: {meta['device']} ({meta['device_name']}), {meta['cpu']}, "
           f"{meta['cores']} cores, {meta['threads']} torch threads, torch {meta['torch']}"
           + (f", load average {meta.get('load_avg_start')} -> {meta.get('load_avg_end')}" if meta.get("load_avg_start")
              else ""), "", line(head), line(["-" * w for w in widths])]
    out += [line(cells) for cells in body]
    return "\n".join(out)


def row_dict(r: Row) -> dict:
    """A row as saved: its fields and its spread."""
    return {**asdict(r), "spread_pct": None if r.spread is None else round(r.spread, 2)}


def rows_to_csv(rows: list[Row], meta: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS + META_IN_CSV, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({**{k: ("" if v is None else v) for k, v in row_dict(r).items()},
                         **{k: meta.get(k, "") for k in META_IN_CSV}})
    return buf.getvalue()


def write_results(out_dir: Path, rows: list[Row], meta: dict, errors: list[dict], *, tag: str = "",
                  latest: bool = True) -> list[Path]:
    """Write the dated pair (named ..._TAG when given) and, with `latest`, overwrite latest.*, each file atomically;
    the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d_%H%M%S", time.strptime(meta["date"][:19], "%Y-%m-%dT%H:%M:%S"))
    slug = "".join(c if c.isalnum() else "-" for c in (meta["device"] if meta["device"] == "cpu"
                                                       else f"{meta['device']}-{meta['device_name']}").lower())
    blob_csv = rows_to_csv(rows, meta).encode()
    blob_json = (json.dumps({"meta": meta, "rows": [row_dict(r) for r in rows], "errors": errors}, indent=2,
                            default=str) + "\n").encode()
    written = []
    for base in (f"{stamp}_{slug}" + (f"_{tag}" if tag else ""), *(["latest"] if latest else [])):
        for suffix, blob in ((".csv", blob_csv), (".json", blob_json)):
            path = out_dir / f"{base}{suffix}"
            atomic_write(path, lambda fh, b=blob: fh.write(b))
            written.append(path)
    return written


def clean_rows(rows: list[Row]) -> None:
    """NaN -> None in every row, so that the JSON is standard."""
    for r in rows:
        for k in ("value", "lo", "hi"):
            value = getattr(r, k)
            setattr(r, k, None if isinstance(value, float) and not math.isfinite(value) else value)


