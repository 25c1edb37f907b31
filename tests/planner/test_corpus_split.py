"""The public corpus's one split: written once, by its rule, and never fitted on."""

import pytest

from planner import calibration, corpus
from planner.perf import opclass


@pytest.fixture(scope="module")
def every():
    return corpus.load_rows() + corpus.load_calibration_rows()


def test_the_split_file_is_what_its_rule_gives(every):
    split = corpus.load_split()
    again = corpus.make_split(
        every,
        [m.family for m in corpus.load_models().values()],
        seed=split.seed,
        held_out_chip=split.held_out_chip,
    )
    assert again.validation_ids == split.validation_ids and again.train_ids == split.train_ids
    assert split.corpus_sha256 == corpus.corpus_digest()
    assert split.train_ids.isdisjoint(split.validation_ids)
    assert len(split.train_ids) + len(split.validation_ids) == len(every)


def test_no_row_of_a_validation_family_or_the_held_out_chip_is_train(every):
    split = corpus.load_split()
    for r in every:
        if r.family in split.validation_families or r.chip == split.held_out_chip:
            assert r.row_id in split.validation_ids, r


def test_train_rows_refuses_a_validation_row(every):
    split = corpus.load_split()
    row = next(r for r in every if r.row_id in split.validation_ids)
    with pytest.raises(corpus.SplitViolation):
        corpus.train_rows([row], split)


def test_a_row_becomes_one_gpus_step_time():
    row = corpus.CorpusRow(
        0, "s", "m", "seq_len=128", "amp", "A100-SXM4-80GB", 8, 1, 32, "tokens_per_s", 8 * 4096.0, ""
    )
    model = corpus.CorpusModel("m", "seq_len=128", "f", "x", (128,), 128, "")
    assert corpus.iteration_ms(row, model) == pytest.approx(32 / (4096 / 128) * 1e3)
    assert row.chip == "A100-80GB" and row.with_optimizer
    no_opt = corpus.CorpusRow(
        1,
        "s",
        "m",
        "",
        "fp32",
        "V100-SXM2-16GB",
        1,
        1,
        16,
        "iteration_ms",
        83.5,
        "train = one forward+backward pass (no optimizer step)",
    )
    assert corpus.iteration_ms(no_opt, None) == 83.5 and not no_opt.with_optimizer


def test_calibration_traces_and_fits_no_frozen_row(monkeypatch):
    """The shipped fit's rows of a train publisher (resnet) and of the frozen test publishers are
    offered; only the train publisher's reach the tracer and the fit."""
    frozen = corpus.load_frozen()
    every = corpus.load_all_rows()
    train = [r for r in every if r.family == "resnet" and r.gpus == 1 and not frozen.holds(r)][:6]
    held = [r for r in every if frozen.holds(r) and r.gpus == 1 and r.family == "alexnet"]
    assert train and held
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
    from planner.hardware import load_gpu_specs

    specs = load_gpu_specs(corpus.ROOT / "catalog/fixtures/gpu_specs.csv")
    model, info = calibration.calibrate_compute(specs, rows=train + held, residual=False)
    assert fitted and set(fitted) <= {r.row_id for r in train}
    assert not any("alexnet" in spec for spec, _, _ in traced)
    assert info["samples"] == len(fitted) and model.meta["frozen_publishers"] == sorted(frozen.publishers)
