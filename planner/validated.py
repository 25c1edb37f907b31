"""The validated error of each prediction source, as the benches last measured it.

``planner/data/validated_errors.json`` is written by the benches (``bench/accuracy_local.py``
for *measured*, ``bench/accuracy_public.py`` for *transferred* and *analytical*)::

    {"measured": {"median_pct": 1.7, "p90_pct": 4.0, "n": 40, "bench": "bench/accuracy_local.py",
                  "measured_at": "2026-12-04"},
     "transferred": {...}, "analytical": {...}}

A missing file, a missing source or a malformed entry means that source is *not validated*:
callers show it as such and never put a number in its place. Pure: no Django, no printing.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SOURCES = ("measured", "transferred", "analytical")
#: Not a prediction source of a row: the error of scaling to several GPUs and nodes (plans state it).
SCALING = "scaling"
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "validated_errors.json"


@dataclass(frozen=True)
class SourceError:
    """Relative iteration-time error of one prediction source on a bench's validation rows."""

    source: str
    median_pct: float
    p90_pct: float
    n: int
    bench: str
    measured_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _entry(source: str, doc: Any) -> SourceError | None:
    if not isinstance(doc, Mapping):
        return None
    median, p90, n = _pct(doc.get("median_pct")), _pct(doc.get("p90_pct")), doc.get("n")
    if median is None or p90 is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    bench = doc.get("bench")
    measured_at = doc.get("measured_at")
    return SourceError(
        source=source,
        median_pct=median,
        p90_pct=p90,
        n=n,
        bench=str(bench) if bench else "",
        measured_at=str(measured_at) if measured_at else None,
    )


def load_validated_errors(path: Path | None = None) -> dict[str, SourceError]:
    """``{source: SourceError}`` for the sources the file validates (possibly none).

    An unreadable or malformed file is logged and treated as absent: planning never fails on it.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("validated errors %s unreadable, every source shown as not validated: %s", path, exc)
        return {}
    if not isinstance(doc, Mapping):
        log.warning("validated errors %s is not an object; ignored", path)
        return {}
    out = {}
    for source in (*SOURCES, SCALING):
        entry = _entry(source, doc.get(source))
        if entry is not None:
            out[source] = entry
        elif source in doc:
            log.warning("validated errors %s: entry %r is malformed; shown as not validated", path, source)
    return out


def error_of(source: str, errors: Mapping[str, SourceError]) -> dict[str, Any]:
    """The JSON a plan row carries: ``{"validated": false, "source": ...}`` or the entry's fields."""
    entry = errors.get(source)
    if entry is None:
        return {"source": source, "validated": False}
    return {"validated": True, **entry.as_dict()}
