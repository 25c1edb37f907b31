"""bench/accuracy_public.py's leave-one-publisher-out lines and the catalog offers it predicts on."""

import importlib.util
import re
import sys

import pytest

from planner import corpus


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("accuracy_public", corpus.ROOT / "bench/accuracy_public.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy_public", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _case(bench, group, measured, predicted, row):
    return bench.LopoCase(group, row, corpus.publisher_of(row.source), measured, predicted, group)


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
