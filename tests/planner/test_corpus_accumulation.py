"""Gradient accumulation of the public corpus's rows (issue 34): planner/data/corpus_accumulation.csv
states, per row, the micro-steps per optimizer step its run used, read from the publisher's table;
the bench predicts those rows with the all-reduce and the optimizer once per k micro-steps."""

from __future__ import annotations

import csv
import importlib.util
import re
import sys

import pytest

from planner import corpus
from planner.perf.compute import PhaseTimes


@pytest.fixture(scope="module")
def rows() -> list[corpus.CorpusRow]:
    return corpus.load_rows()


@pytest.fixture(scope="module")
def stated() -> list[dict[str, str]]:
    with open(corpus.ACCUMULATION_CSV, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_stated_row_names_exactly_one_corpus_row(rows, stated):
    keys = [
        (corpus.publisher_of(r.source), r.model, r.corpus_input_shape, r.precision, r.gpu)
        + (r.gpus_per_node, r.nodes, r.per_gpu_batch)
        for r in rows
    ]
    for s in stated:
        key = (s["publisher"], s["model"], s["input_shape"], s["precision"], s["gpu"])
        key += (int(s["gpus_per_node"]), int(s["nodes"]), int(s["per_gpu_batch"]))
        assert keys.count(key) == 1, s
    assert sum(r.accumulation_steps > 1 for r in rows) == sum(
        int(s["accumulation_steps"]) > 1 for s in stated
    )


def test_k_micro_batches_make_the_accumulated_batch_the_table_prints(rows, stated):
    """k x per-GPU batch is the accumulated batch per GPU of the row's own notes (within the
    table's "126" for 128), so k and the micro-batch are read consistently."""
    for s in stated:
        accumulated = int(re.search(r"accumulated batch(?:/GPU)? (\d+)", s["evidence"])[1])
        assert int(s["accumulation_steps"]) * int(s["per_gpu_batch"]) == pytest.approx(
            accumulated, rel=0.02
        ), s


def test_only_rows_that_state_no_accumulation_keep_one_step(rows):
    bert_pretraining = [
        r
        for r in rows
        if r.model == "bert-large" and "pre-training" in r.notes and "DeepLearningExamples" in r.source
    ]
    assert len(bert_pretraining) == 36
    # every one but the 32-node FP16 phase-1 row ("accumulation steps 2 and 1") accumulates
    [single] = [r for r in bert_pretraining if r.accumulation_steps == 1]
    assert (single.nodes, single.precision, single.corpus_input_shape) == (32, "amp", "seq_len=128")
    assert all(r.accumulation_steps == 1 for r in rows if "accumulat" not in r.notes.lower())


def test_a_row_without_a_repository_is_left_as_it_is():
    row = corpus.CorpusRow(1, "a test", "m", "3x8x8", "fp32", "A100", 1, 1, 8, "iteration_ms", 1.0, "")
    assert corpus.with_accumulation([row]) == [row]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("accuracy_public", corpus.ROOT / "bench/accuracy_public.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accuracy_public", module)
    spec.loader.exec_module(module)
    return module


def test_the_bench_pays_the_optimizer_once_per_k_micro_steps(bench, rows):
    row = next(r for r in rows if r.accumulation_steps == 64 and r.gpus == 1)
    phases = PhaseTimes(100.0, 200.0, 32.0)
    assert bench.step_ms(phases, row) == pytest.approx(300.0 + 32.0 / 64)
    plain = next(r for r in rows if r.accumulation_steps == 1 and r.with_optimizer)
    assert bench.step_ms(phases, plain) == pytest.approx(332.0)
