"""bench/accuracy_public.py: its leave-one-publisher-out predictions through the product's code, the
lines and validated_errors.json fields it writes from them, and issue 34's targets."""

import dataclasses
import importlib.util
import json
import re
import sys

import pytest

from planner import calibration, corpus

NVIDIA = "NVIDIA/DeepLearningExamples"
# ResNet-50 calibration rows (one trace): A100-80GB, A100 and H100, tf32, batch 640/720/360.
ROW_IDS = (10010, 10012, 10018, 10029, 10030)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("accuracy_public", corpus.ROOT / "bench/accuracy_public.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy_public", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lopo(bench):
    """The bench's Lopo with the traces of the ResNet-50 rows (cached in var/corpus_traces)."""
    lopo = bench.Lopo(1)
    rows = [r for r in lopo.rows if r.row_id in ROW_IDS]
    traces, errors = calibration.corpus_traces({calibration.row_trace_key(r, lopo.models) for r in rows})
    assert not errors
    lopo.traces.update(traces)
    return lopo


@pytest.fixture(scope="module")
def rows(lopo):
    return {r.row_id: r for r in lopo.rows if r.row_id in ROW_IDS}


@pytest.fixture(scope="module")
def model(lopo):
    """The shipped compute model (the folds refit it; the code paths are the same)."""
    return calibration.load_compute_model(lopo.specs)


def _case(bench, group, measured, predicted, row):
    return bench.LopoCase(group, row, corpus.publisher_of(row.source), measured, predicted, group)


def _ms(lopo, row):
    return corpus.iteration_ms(row, lopo.models[row.key])


def test_the_lines_have_the_issues_format_on_a_tiny_subset(bench):
    rows = corpus.load_rows_2()[:3]
    cases = [
        _case(bench, "analytical", 100.0, 110.0, rows[0]),
        _case(bench, "analytical", 100.0, 80.0, rows[1]),
        _case(bench, "analytical", 100.0, 100.0, rows[2]),
    ]
    line = bench.lopo_line("analytical", cases)
    assert re.fullmatch(r"analytical: n=3 median 10\.0% p90 \d+\.\d% ?", line), line
    assert bench.lopo_line("test scaling", []) == "test scaling: n=0"
    assert bench.lopo_line("test analytical", cases).startswith("test analytical: n=3 median 10.0% p90 ")


def test_a_t4_trace_row_is_predicted_on_the_catalogs_g4dn_12xlarge(bench):
    cand = bench.catalog_candidate("g4dn.12xlarge", 2)
    assert (cand.gpu_model, cand.gpus_per_node, cand.vcpus, cand.network_gbps) == ("T4", 2, 48, 50.0)
    assert bench.catalog_candidate("no-such.type", 1) is None


def test_the_oracle_step_is_near_the_published_one_and_none_when_the_batch_does_not_fit(
    bench, lopo, rows, model
):
    row = rows[10018]  # A100-80GB, tf32, batch 640
    wl = bench.row_workload(lopo.traces, lopo.models, row)
    step = bench.oracle_step(model, wl, row)
    assert 0.5 < step / _ms(lopo, row) < 2
    assert bench.oracle_step(model, wl, dataclasses.replace(row, per_gpu_batch=10**7)) is None


def test_a_transferred_step_scales_with_the_profiled_time_and_lands_near_the_published_one(
    bench, lopo, rows, model
):
    a, b = rows[10030], rows[10018]  # H100 -> A100-80GB, same model, precision and batch
    cost = bench.row_workload(lopo.traces, lopo.models, b).cost
    t_a = _ms(lopo, a)
    pred = bench.transfer(model, cost, a, b, t_a)
    assert 0.5 < pred / _ms(lopo, b) < 2
    assert bench.transfer(model, cost, a, b, 2 * t_a) == pytest.approx(2 * pred)


def test_a_publishers_rows_are_predicted_analytically_and_from_its_own_rows_on_other_gpus(
    bench, lopo, rows, model
):
    cases = lopo.predict(model, list(rows.values()), NVIDIA)
    analytical = [c for c in cases if c.group == "analytical"]
    transferred = [c for c in cases if c.group == "transferred"]
    assert sorted(c.row.row_id for c in analytical) == sorted(ROW_IDS)
    # same batch and precision on another chip: A100-80GB 640 <-> H100 640 only
    assert sorted((c.row.row_id, c.detail) for c in transferred) == [
        (10018, "from H100 (2 rows)"),
        (10029, "from A100-80GB (1 rows)"),
        (10030, "from A100-80GB (1 rows)"),
    ]
    assert all(c.measured == _ms(lopo, c.row) and c.publisher == NVIDIA for c in cases)


def test_it_writes_the_figures_its_lines_print_and_leaves_the_measured_entry_alone(
    bench, lopo, rows, model, tmp_path
):
    cases = lopo.predict(model, list(rows.values()), NVIDIA)
    entries = bench.validated_entries(cases, "2026-12-07")
    ana = entries["analytical"]
    line = bench.lopo_line("analytical", [c for c in cases if c.group == "analytical"])
    assert line == f"analytical: n={ana['n']} median {ana['median_pct']:.1f}% p90 {ana['p90_pct']:.1f}%"
    assert ana["bench"] == ana["lopo_bench"] == "bench/accuracy_public.py (LOPO)"
    assert ana["lopo_q10"] <= ana["lopo_q50"] <= ana["lopo_q90"] and ana["lopo_n"] == ana["n"]
    assert entries["scaling"] is None and entries["ddp-multinode"] is None  # no pair, no multi-node row

    path = tmp_path / "validated_errors.json"
    measured = {"median_pct": 2.4, "p90_pct": 5.1, "n": 11, "bench": "bench/accuracy_local.py"}
    stale = {"median_pct": 2.5, "p90_pct": 9.3, "n": 36, "bench": "bench/accuracy_public.py"}
    path.write_text(
        json.dumps({"measured": measured, "scaling": stale, "analytical": {**stale, "note": "x"}})
    )
    bench.write_validated(entries, path)
    doc = json.loads(path.read_text())
    assert doc["measured"] == measured
    assert "scaling" not in doc  # no LOPO figure: the old split's is not shown as validated
    assert doc["analytical"] == {**ana, "note": "x"}

    from planner.validated import load_model_errors, load_validated_errors

    assert load_validated_errors(path)["transferred"].median_pct == entries["transferred"]["median_pct"]
    assert load_model_errors(path)["analytical"].q50 == ana["lopo_q50"]


def _one_per_group(bench, rows, ratio):
    return [_case(bench, g, 100.0, 100.0 * ratio, rows[10018]) for g in bench.GROUPS]


def test_the_targets_are_met_only_when_every_median_the_coverage_and_every_gpus_ratio_are(bench, rows):
    assert bench.missed_targets(_one_per_group(bench, rows, 1.04), 80.0) == []
    assert bench.target_line([]).endswith(": met")

    assert bench.missed_targets(_one_per_group(bench, rows, 1.04), 92.0) == ["coverage 92.0% outside 75-90%"]
    assert bench.missed_targets(_one_per_group(bench, rows, 1.04), None) == ["coverage: no banded row"]
    high = bench.missed_targets(_one_per_group(bench, rows, 1.3), 80.0)
    assert high == [
        "transferred median 30.0% > 10%",
        "analytical median 30.0% > 20%",
        "scaling median 30.0% > 5%",
        "ddp-multinode median 30.0% > 15%",
        "ratio outside 0.8-1.25: A100-80GB 1.30",
    ]
    assert bench.target_line(high).endswith("NOT met (" + "; ".join(high) + ")")
    only_time = [c for c in _one_per_group(bench, rows, 1.0) if c.group != "scaling"]
    assert bench.missed_targets(only_time, 80.0) == ["scaling: no case"]


def test_a_gpus_ratio_is_the_median_of_its_time_rows_not_of_its_speed_ups(bench, rows):
    cases = [
        _case(bench, "analytical", 100.0, 70.0, rows[10029]),
        _case(bench, "transferred", 100.0, 90.0, rows[10029]),
        _case(bench, "analytical", 100.0, 100.0, rows[10018]),
        _case(bench, "scaling", 7.0, 3.5, rows[10018]),
    ]
    assert bench.gpu_ratios(cases) == {"A100-80GB": 1.0, "H100": pytest.approx(0.8)}
