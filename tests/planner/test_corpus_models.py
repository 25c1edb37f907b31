"""planner/data/corpus_models.csv: one builder (or a reason) per model of the public corpus."""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import pytest

from workload.specs import check_library_spec, load_model

ROOT = Path(__file__).resolve().parents[2]
CORPUS_CSV = ROOT / "catalog/fixtures/public_gpu_training.csv"
MODELS_CSV = ROOT / "planner/data/corpus_models.csv"
COLUMNS = ["model", "corpus_input_shape", "family", "spec", "input_shape", "tokens_per_sample", "reason"]


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, str]]:
    return read(CORPUS_CSV)


@pytest.fixture(scope="module")
def models() -> list[dict[str, str]]:
    return read(MODELS_CSV)


def seq_len(corpus_shape: str) -> int | None:
    match = re.match(r"^seq_len=(\d+)", corpus_shape)
    return int(match[1]) if match else None


def test_the_file_has_exactly_the_agreed_columns():
    with open(MODELS_CSV, newline="") as fh:
        assert next(csv.reader(fh)) == COLUMNS


def test_every_corpus_model_has_a_row(corpus, models):
    wanted = {(r["model"], r["input_shape"]) for r in corpus}
    have = Counter((r["model"], r["corpus_input_shape"]) for r in models)
    assert wanted - set(have) == set()
    assert set(have) - wanted == set(), "rows for models that are not in the corpus"
    assert [key for key, n in have.items() if n > 1] == []


def test_every_row_has_a_family(models):
    assert [r["model"] for r in models if not re.fullmatch(r"[a-z0-9][a-z0-9\-]*", r["family"])] == []


def test_variants_of_one_architecture_share_a_family(models):
    family = {r["model"]: r["family"] for r in models}
    groups = [
        ("resnet", ["resnet18", "resnet50", "resnet152", "wide_resnet50_2"]),
        ("resnext", ["resnext101-32x4d", "resnext50_32x4d", "resnext101_32x8d"]),
        ("seresnext", ["se-resnext101-32x4d", "seresnext50_32x4d"]),
        ("roberta", ["distilroberta-base", "roberta-base", "roberta-large"]),
        (
            "efficientnet",
            ["efficientnet-b0", "efficientnet-widese-b4", "efficientnet_b7", "tf_efficientnet_b0"],
        ),
        ("mpt", ["mpt-125m", "mpt-70b"]),
        ("vgg", ["vgg11", "vgg16", "vgg19_bn"]),
    ]
    for name, members in groups:
        assert {m: family[m] for m in members} == dict.fromkeys(members, name)


def test_every_mapped_spec_is_a_valid_library_spec(models):
    bad = {}
    for spec in sorted({r["spec"] for r in models if r["spec"]}):
        try:
            check_library_spec(spec)
        except ValueError as exc:
            bad[spec] = str(exc)
    assert bad == {}


def test_mapped_rows_have_an_integer_input_shape_and_no_reason(models):
    for r in models:
        if r["spec"]:
            assert re.fullmatch(r"\d+(,\d+)*", r["input_shape"]), r
            assert r["reason"] == "", r


def test_unmapped_rows_say_why(models):
    for r in models:
        if not r["spec"]:
            assert len(r["reason"].strip()) >= 10, r
            assert r["input_shape"] == "", r


def test_image_models_take_the_corpus_resolution(models):
    for r in models:
        match = re.match(r"^(\d+)x(\d+)x(\d+)$", r["corpus_input_shape"])
        if r["spec"] and match:
            assert r["input_shape"] == ",".join(match.groups()), r


def test_token_models_take_the_corpus_sequence_length(models):
    for r in models:
        n = seq_len(r["corpus_input_shape"])
        if r["spec"] and n is not None:
            assert r["input_shape"] == str(n), r


def test_token_models_cover_their_sequence_length(models):
    """``max_seq_len`` (MPT) or ``max_position_embeddings`` (RoBERTa: 2 of them are offsets)
    reach the row's sequence length; BERT's default 512 does."""
    for r in models:
        n = seq_len(r["corpus_input_shape"])
        if not r["spec"].startswith("transformers:") or n is None:
            continue
        found = re.search(r"(max_seq_len|max_position_embeddings)=(\d+)", r["spec"])
        if found is None:
            limit = 512
        else:
            limit = int(found[2]) - (2 if found[1] == "max_position_embeddings" else 0)
        assert limit >= n, r


def test_tokens_per_s_rows_have_tokens_per_sample(corpus, models):
    by_key = {(r["model"], r["corpus_input_shape"]): r for r in models}
    token_keys = {(r["model"], r["input_shape"]) for r in corpus if r["metric"] == "tokens_per_s"}
    for key in token_keys:
        row = by_key[key]
        if row["spec"]:
            assert row["tokens_per_sample"] == row["input_shape"], row
        else:  # variable-length speech/translation batches have no fixed figure: the reason says so
            assert row["tokens_per_sample"].isdigit() or "variable" in row["reason"], row


def test_only_tokens_per_s_rows_have_tokens_per_sample(corpus, models):
    token_keys = {(r["model"], r["input_shape"]) for r in corpus if r["metric"] == "tokens_per_s"}
    assert [
        r["model"]
        for r in models
        if r["tokens_per_sample"] and (r["model"], r["corpus_input_shape"]) not in token_keys
    ] == []


def test_a_small_mapped_timm_model_builds_on_the_meta_device(models):
    import torch

    row = next(r for r in models if r["spec"] == "timm:resnet18")
    shape = tuple(int(x) for x in row["input_shape"].split(","))
    with torch.device("meta"):
        model = load_model(row["spec"], num_classes=1000, input_shape=shape)
        out = model(torch.randn(2, *shape))
    assert tuple(out.shape) == (2, 1000)
