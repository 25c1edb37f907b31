"""Issue 34's foundation: publishers, the frozen test set no fit reads, the second corpus."""

import csv
import json

import pytest

from planner import calibration, corpus
from planner.hardware import load_gpu_specs
from planner.perf import opclass


@pytest.fixture(scope="module")
def every():
    return corpus.load_all_rows()


def test_every_row_of_every_corpus_has_exactly_one_publisher(every):
    files = (corpus.CORPUS_CSV, corpus.CALIBRATION_CSV, corpus.CORPUS_2_CSV)
    assert len(every) == sum(sum(1 for _ in csv.DictReader(open(f, newline=""))) for f in files)
    publishers = {r.row_id: corpus.publisher_of(r.source) for r in every}
    assert len(publishers) == len(every)  # one id space, one publisher per id
    assert all(p.count("/") == 1 and " " not in p for p in publishers.values())
    found = set(publishers.values())
    for expected in (
        "NVIDIA/DeepLearningExamples",
        "mosaicml/llm-foundry",
        "tlkh/transformers-benchmarking",
        "huggingface/pytorch-image-models",
        "u39kun/deep-learning-benchmark",
        "lambdal/deeplearning-benchmark",
        "petuum/adaptdl",
        "ml-energy/zeus",
    ):
        assert expected in found


def test_nvidias_readme_rows_and_its_resnet50_calibration_rows_are_one_publisher():
    dle = "NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT/README.md (https://github.com/NVIDIA/DeepLearningExamples/blob/729963dd/x)"
    rn50 = "nvidia-dle-pytorch-rn50 (https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch)"
    assert corpus.publisher_of(dle) == corpus.publisher_of(rn50) == "NVIDIA/DeepLearningExamples"


def test_a_source_without_a_repository_is_refused():
    with pytest.raises(ValueError, match="github.com"):
        corpus.publisher_of("a blog post, 2021")


def test_the_frozen_file_is_what_its_rule_gives(every):
    doc = json.loads(corpus.FROZEN_FILE.read_text())
    assert doc["rule"] == corpus.FROZEN_RULE and doc["seed"] == corpus.FROZEN_SEED
    eligible = {corpus.publisher_of(r.source) for r in corpus.load_rows_2()}
    again = corpus.choose_frozen(every, eligible, seed=doc["seed"])
    assert sorted(again.publishers) == doc["publishers"] == sorted(corpus.load_frozen().publishers)
    assert doc["all_publishers"] == sorted({corpus.publisher_of(r.source) for r in every})
    # about a fifth of the publishers, none that a shipped fit has read
    assert len(doc["publishers"]) == round(len(doc["all_publishers"]) / 5)
    first = {corpus.publisher_of(r.source) for r in corpus.load_rows() + corpus.load_calibration_rows()}
    assert first.isdisjoint(doc["publishers"])


def test_train_rows_refuses_a_frozen_publishers_row_whatever_the_split_says(every):
    frozen = corpus.load_frozen()
    row = next(r for r in every if frozen.holds(r))
    lying = corpus.Split(0, "", frozenset(), frozenset({row.row_id}), frozenset(), "")
    with pytest.raises(corpus.FrozenViolation):
        corpus.train_rows([row], lying)


def test_the_products_fit_never_sees_a_frozen_publishers_row(monkeypatch, every):
    """calibrate_compute offered every row of the ResNet-50 calibration file and of the frozen
    publishers, with a split that calls the frozen rows train: it refuses before tracing."""
    frozen = corpus.load_frozen()
    frozen_rows = [r for r in every if frozen.holds(r)]
    calib = corpus.load_calibration_rows()
    specs = load_gpu_specs(corpus.ROOT / "catalog/fixtures/gpu_specs.csv")
    traced, fitted = [], []
    real_traces, real_fit = calibration.corpus_traces, opclass.fit

    def spy_traces(needed, **kw):
        traced.extend(needed)
        return real_traces(needed, **kw)

    def spy_fit(samples, specs, **kw):
        fitted.extend(s.row_id for s in samples)
        return real_fit(samples, specs, **kw)

    monkeypatch.setattr(calibration, "corpus_traces", spy_traces)
    monkeypatch.setattr(opclass, "fit", spy_fit)
    rows = calib + frozen_rows
    lying = corpus.Split(0, "", frozenset(), frozenset(r.row_id for r in rows), frozenset(), "")
    with pytest.raises(corpus.FrozenViolation):
        calibration.calibrate_compute(specs, split=lying, rows=rows, residual=False)
    assert not traced and not fitted
    # The benches' fold split leaves them out; the fit then sees the other rows only.
    fold = corpus.lopo_split(rows, "", frozen)
    calibration.calibrate_compute(specs, split=fold, rows=rows, models=corpus.all_models(), residual=False)
    assert fitted and {r.row_id for r in frozen_rows}.isdisjoint(fitted)
    assert set(fitted) <= {r.row_id for r in calib}


def test_a_lopo_fold_holds_out_one_publisher_and_no_frozen_row(every):
    frozen = corpus.load_frozen()
    fold = corpus.lopo_split(every, "mosaicml/llm-foundry", frozen)
    for r in every:
        publisher = corpus.publisher_of(r.source)
        if publisher in frozen.publishers:
            assert r.row_id not in fold.train_ids and r.row_id not in fold.validation_ids
        elif publisher == "mosaicml/llm-foundry":
            assert r.row_id in fold.validation_ids
        else:
            assert r.row_id in fold.train_ids


def test_the_second_corpus_keeps_each_rows_source_and_reads_boards_and_precisions():
    rows = corpus.load_rows_2()
    with open(corpus.CORPUS_2_CSV, newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert [r.source for r in rows] == [r["source"] for r in raw]
    assert {r.precision for r in rows} <= {"fp32", "amp", "tf32", "fp16", "bf16"}
    t4 = [r for r in rows if r.chip == "T4" and r.nodes > 1]
    assert t4 and all(corpus.instance_of(r) == "g4dn.12xlarge" for r in t4)
    assert next(r for r in rows if r.gpu.startswith("V100-PCIe")).chip == "V100"


def test_the_shipped_fit_still_reads_the_first_corpus_only():
    """The product's training set is unchanged: no row of the second corpus is a train row of
    the shipped split, so ``calibrate_compute`` (default rows and split) cannot fit on one."""
    split = corpus.load_split()
    assert all(r.row_id not in split.train_ids for r in corpus.load_rows_2())
    assert corpus.CORPUS_CSV.name == "public_gpu_training.csv"
