"""The validated error per prediction source, read from the file the benches write."""

from __future__ import annotations

import json

from planner.validated import MULTINODE, SourceError, error_of, load_model_errors, load_validated_errors


def test_it_reads_each_validated_source(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(
        json.dumps(
            {
                "measured": {
                    "median_pct": 1.7,
                    "p90_pct": 4.0,
                    "n": 40,
                    "bench": "bench/accuracy_local.py",
                    "measured_at": "2026-12-04",
                },
                "transferred": {
                    "median_pct": 7,
                    "p90_pct": 19.5,
                    "n": 120,
                    "bench": "bench/accuracy_public.py",
                },
            }
        )
    )
    errors = load_validated_errors(path)
    assert errors["measured"] == SourceError(
        "measured", 1.7, 4.0, 40, "bench/accuracy_local.py", "2026-12-04"
    )
    assert errors["transferred"].p90_pct == 19.5 and errors["transferred"].measured_at is None
    assert "analytical" not in errors  # not in the file: not validated


def test_it_reads_the_ddp_multinode_entry_the_lopo_bench_writes_beside_its_quantiles(tmp_path):
    path = tmp_path / "v.json"
    entry = {
        "median_pct": 12.5,
        "p90_pct": 61.0,
        "max_pct": 140.2,
        "n": 116,
        "bench": "bench/accuracy_public.py (LOPO)",
        "measured_at": "2026-12-07",
        "lopo_q10": -1.1,
        "lopo_q50": -0.2,
        "lopo_q90": 1.7,
        "lopo_n": 116,
        "lopo_bench": "bench/accuracy_public.py (LOPO)",
        "lopo_measured_at": "2026-12-07",
    }
    path.write_text(json.dumps({MULTINODE: entry}))
    assert load_validated_errors(path) == {
        MULTINODE: SourceError(MULTINODE, 12.5, 61.0, 116, "bench/accuracy_public.py (LOPO)", "2026-12-07")
    }
    assert load_model_errors(path)[MULTINODE].q90 == 1.7


def test_a_missing_or_broken_file_validates_nothing(tmp_path):
    assert load_validated_errors(tmp_path / "absent.json") == {}
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert load_validated_errors(broken) == {}
    broken.write_text("[1, 2]")
    assert load_validated_errors(broken) == {}


def test_a_malformed_entry_is_not_validated_rather_than_guessed(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(
        json.dumps(
            {
                "measured": {"median_pct": 1.7, "n": 40},  # no p90
                "transferred": {"median_pct": 5, "p90_pct": -1, "n": 3},  # negative error
                "analytical": {"median_pct": 14, "p90_pct": 38, "n": True},  # n is not a count
                "bogus": {"median_pct": 1, "p90_pct": 2, "n": 3},
            }
        )
    )
    assert load_validated_errors(path) == {}


def test_a_row_says_whether_its_source_is_validated():
    errors = {"measured": SourceError("measured", 1.7, 4.0, 40, "bench/accuracy_local.py")}
    assert error_of("measured", errors) == {
        "validated": True,
        "source": "measured",
        "median_pct": 1.7,
        "p90_pct": 4.0,
        "n": 40,
        "bench": "bench/accuracy_local.py",
        "measured_at": None,
    }
    assert error_of("analytical", errors) == {"source": "analytical", "validated": False}
