"""The public training-throughput corpus: rows, builders, publishers and the frozen test set.

What fits and what validates (issue 34): the shipped compute model is fitted on every row of
every publisher except the frozen test publishers (:func:`all_publishers_split`); the benches
validate leave-one-publisher-out (:func:`lopo_split`).  The family split below (the first
corpus only) is kept for the tests and tools that still read ``public_split.json``; no shipped
model is fitted on it any more.

Sources: ``catalog/fixtures/public_gpu_training.csv`` (a copy of
``shared/data/public_gpu_training.csv``, 875 published measurements with their URLs) and
``planner/data/corpus_models.csv`` (for each corpus model: its family, the library spec that
builds it on the ``meta`` device, or the reason there is none).

What one row says.  ``value`` is an aggregate rate over all ``gpus = gpus_per_node × nodes``
GPUs (images/s, samples/s or tokens/s) or an iteration time in ms. :func:`iteration_ms` turns it
into the time of one training step of one GPU at its ``per_gpu_batch``::

    t = per_gpu_batch / (rate / gpus) · 1000            rate in samples/s
    rate_samples = rate_tokens / tokens_per_sample       for tokens/s rows

Rows that time forward + backward only (tlkh, u39kun: "excludes optimizer step", "no optimizer
step") are marked ``with_optimizer=False``; the model then predicts those two phases.

The split (:func:`make_split`, written once to ``planner/data/public_split.json``)::

    families  = sorted set of corpus families (corpus_models.csv)
    shuffle(families, random.Random(SPLIT_SEED))
    validation families = every third of the shuffled list (positions 0, 3, 6, …)
    held-out chip       = H100 (the newest chip of the corpus: the case of a new GPU generation
                          that the planner must predict from older ones)
    validation rows     = rows of a validation family, or measured on the held-out chip
    train rows          = all others

Nothing of validation may reach a fit: the calibration takes the split file and refuses a row
id of validation (:func:`train_rows`).  The ResNet-50 calibration rows
(``calibration_resnet50_single_gpu.csv``) belong to family ``resnet`` and to their chips, and
follow the same rule.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS_CSV = ROOT / "catalog/fixtures/public_gpu_training.csv"
CALIBRATION_CSV = ROOT / "catalog/fixtures/calibration_resnet50_single_gpu.csv"
MODELS_CSV = ROOT / "planner/data/corpus_models.csv"
SPLIT_FILE = ROOT / "planner/data/public_split.json"
SPLIT_SEED = 18
HELD_OUT_CHIP = "H100"
# The calibration file's rows get ids after the corpus's, so one id space covers both.
CALIBRATION_ID_OFFSET = 10_000

# Corpus board names → gpu_specs.csv chips (the transfer model's aliases cover the rest).
BOARD_TO_CHIP = {
    "A100-SXM4-80GB": "A100-80GB",
    "A100-SXM4-40GB": "A100",
    "V100-SXM2-16GB": "V100",
    "V100-SXM2-32GB": "V100-32GB",
    "V100-SXM3-32GB": "V100-32GB",  # DGX-2's 350 W V100: same chip, a slightly higher sustained clock
    "H100-SXM5-80GB": "H100",
    "H200-SXM-141GB": "H200",
    "A10": "A10G",
    "RTX-3090": "RTX-3090",
    # public_gpu_training_2.csv boards (their notes in brackets are dropped by :func:`board_of`)
    "V100-PCIe": "V100",
    "V100-PCIE-32GB": "V100-32GB",
    "V100-32GB": "V100-32GB",
    "A100-PCIE-80GB": "A100-PCIe-80GB",  # the transfer model's PCIe spec (1,935 GB/s, no NVLink)
    "A40-48GB": "A40",
    "A100-80GB": "A100-80GB",
    "H100-80GB-HBM3": "H100",
    "A10-24GB": "A10G",
}


@dataclass(frozen=True)
class CorpusModel:
    model: str
    corpus_input_shape: str
    family: str
    spec: str
    input_shape: tuple[int, ...]
    tokens_per_sample: int | None
    reason: str

    @property
    def mapped(self) -> bool:
        return bool(self.spec)

    @property
    def data_shape(self) -> tuple[int, ...]:
        """The shape of one sample as the data loader hands it over (``3x32x32``): what the
        input pipeline is charged for.  It differs from the traced ``input_shape`` where the
        trace stands in for a variant no registry builds (CIFAR ResNet-18: see its reason)."""
        parts = self.corpus_input_shape.split("x")
        if len(parts) > 1 and all(p.strip().isdigit() for p in parts):
            return tuple(int(p) for p in parts)
        return self.input_shape


#: (text in a row's notes, hardware threads of that system): the host CPUs that feed the GPUs.
HOST_THREADS = (
    ("DGX A100", 256),
    ("DGX-2", 96),
    ("DGX-1", 80),
    ("DGX H100", 224),
    ("p4d.24xlarge", 96),
)


@dataclass(frozen=True)
class CorpusRow:
    row_id: int
    source: str
    model: str
    corpus_input_shape: str
    precision: str
    gpu: str
    gpus_per_node: int
    nodes: int
    per_gpu_batch: int
    metric: str
    value: float
    notes: str
    family: str = ""
    #: micro-steps per optimizer step the row's run accumulated gradients over (1: none stated);
    #: from :data:`ACCUMULATION_CSV` (:func:`with_accumulation`)
    accumulation_steps: int = 1

    @property
    def chip(self) -> str:
        return BOARD_TO_CHIP.get(self.gpu, self.gpu)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def with_optimizer(self) -> bool:
        text = self.notes.lower()
        return "excludes optimizer" not in text and "no optimizer step" not in text

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.corpus_input_shape)

    @property
    def host_vcpus(self) -> int | None:
        """Hardware threads of the machine the row ran on, where its notes name a known system
        (datasheets: DGX-1 2 x 20-core E5-2698 v4, DGX-2/2H 2 x 24-core Platinum 8168, DGX A100
        2 x 64-core EPYC 7742, DGX H100 2 x 56-core Platinum 8480C, all with 2 threads per core;
        p4d.24xlarge 96 vCPUs); ``None`` when the notes do not say."""
        for pattern, threads in HOST_THREADS:
            if pattern in self.notes:
                return threads
        return None


def load_models(path: Path = MODELS_CSV) -> dict[tuple[str, str], CorpusModel]:
    out = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            shape = (
                tuple(int(x) for x in r["input_shape"].split(",") if x.strip()) if r["input_shape"] else ()
            )
            tps = int(r["tokens_per_sample"]) if r.get("tokens_per_sample") else None
            m = CorpusModel(
                r["model"],
                r["corpus_input_shape"],
                r["family"],
                r["spec"].strip(),
                shape,
                tps,
                r.get("reason", ""),
            )
            out[(m.model, m.corpus_input_shape)] = m
    return out


def _read_rows(
    path: Path,
    models: Mapping[tuple[str, str], CorpusModel],
    first_id: int,
    row: Callable[[dict[str, str]], tuple[str, str, str]],
) -> list[CorpusRow]:
    """The rows of a corpus CSV (both corpora share its columns), ids from ``first_id``;
    ``row(r)`` gives the (precision, board, notes) each corpus reads its own way."""
    rows = []
    with open(path, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            m = models.get((r["model"], r["input_shape"]))
            precision, board, notes = row(r)
            rows.append(
                CorpusRow(
                    first_id + i,
                    r["source"],
                    r["model"],
                    r["input_shape"],
                    precision,
                    board,
                    int(r["gpus_per_node"]),
                    int(r["nodes"]),
                    int(float(r["per_gpu_batch"])),
                    r["metric"],
                    float(r["value"]),
                    notes,
                    m.family if m else "",
                )
            )
    return rows


def load_rows(
    path: Path = CORPUS_CSV, models: Mapping[tuple[str, str], CorpusModel] | None = None
) -> list[CorpusRow]:
    models = load_models() if models is None else models
    rows = _read_rows(path, models, 0, lambda r: (r["precision"].lower(), r["gpu"], r["notes"]))
    return with_accumulation(rows)


# Gradient accumulation (issue 34).  NVIDIA's BERT pre-training (LAMB) accumulates gradients over
# k micro-batches per optimizer step, and its README tables print k beside the micro-batch: the
# all-reduce and the optimizer run once per k micro-steps while the published sequences/s count
# every micro-step.  Each such row's k, with the table's words it was read from (and where a
# printed figure contradicts the others, how it was read), is in this file, keyed by the row.
ACCUMULATION_CSV = ROOT / "planner/data/corpus_accumulation.csv"
AccumulationKey = tuple[str, str, str, str, str, int, int, int]


def _accumulation_key(
    publisher: str, model: str, shape: str, precision: str, gpu: str, gpn: int, nodes: int, batch: int
) -> AccumulationKey:
    return (publisher, model, shape, precision, gpu, gpn, nodes, batch)


def load_accumulation(path: Path = ACCUMULATION_CSV) -> dict[AccumulationKey, int]:
    """``{(publisher, model, input shape, precision, gpu, gpus/node, nodes, per-GPU batch): k}``."""
    with open(path, newline="") as fh:
        return {
            _accumulation_key(
                r["publisher"],
                r["model"],
                r["input_shape"],
                r["precision"],
                r["gpu"],
                int(r["gpus_per_node"]),
                int(r["nodes"]),
                int(r["per_gpu_batch"]),
            ): int(r["accumulation_steps"])
            for r in csv.DictReader(fh)
        }


def with_accumulation(rows: Iterable[CorpusRow], path: Path = ACCUMULATION_CSV) -> list[CorpusRow]:
    """``rows`` with the accumulation steps :data:`ACCUMULATION_CSV` states for them (1 elsewhere)."""
    table = load_accumulation(path)
    out = []
    for r in rows:
        try:
            publisher = publisher_of(r.source)
        except ValueError:  # a row without a repository (a test's) has no stated accumulation
            out.append(r)
            continue
        key = _accumulation_key(
            publisher,
            r.model,
            r.corpus_input_shape,
            r.precision,
            r.gpu,
            r.gpus_per_node,
            r.nodes,
            r.per_gpu_batch,
        )
        out.append(dataclasses.replace(r, accumulation_steps=table[key]) if key in table else r)
    return out


def load_calibration_rows(path: Path = CALIBRATION_CSV) -> list[CorpusRow]:
    """The ResNet-50 calibration rows as corpus rows of family ``resnet`` (ids from 10,000)."""
    rows = []
    with open(path, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            rows.append(
                CorpusRow(
                    CALIBRATION_ID_OFFSET + i,
                    r["source"],
                    "resnet50",
                    "3x224x224",
                    r["precision"].lower(),
                    r["gpu"],
                    1,
                    1,
                    int(r["per_gpu_batch"]),
                    r.get("metric", "images_per_s"),
                    float(r["value"]),
                    r.get("notes", ""),
                    "resnet",
                )
            )
    return rows


def iteration_ms(row: CorpusRow, model: CorpusModel | None) -> float | None:
    """One GPU's training-step time in ms (see the module docstring); ``None`` when the
    row's unit cannot be turned into one (tokens without a tokens-per-sample figure)."""
    if row.metric == "iteration_ms":
        return row.value
    rate = row.value / row.gpus
    if row.metric == "tokens_per_s":
        if model is None or not model.tokens_per_sample:
            return None
        rate /= model.tokens_per_sample
    elif row.metric not in ("images_per_s", "samples_per_s"):
        return None
    return row.per_gpu_batch / rate * 1e3 if rate > 0 else None


# --------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Split:
    seed: int
    held_out_chip: str
    validation_families: frozenset[str]
    train_ids: frozenset[int]
    validation_ids: frozenset[int]
    corpus_sha256: str

    def is_validation(self, row: CorpusRow) -> bool:
        return row.row_id in self.validation_ids

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": RULE,
            "seed": self.seed,
            "held_out_chip": self.held_out_chip,
            "validation_families": sorted(self.validation_families),
            "corpus_sha256": self.corpus_sha256,
            "train": sorted(self.train_ids),
            "validation": sorted(self.validation_ids),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Split:
        return cls(
            int(doc["seed"]),
            str(doc["held_out_chip"]),
            frozenset(doc["validation_families"]),
            frozenset(int(i) for i in doc["train"]),
            frozenset(int(i) for i in doc["validation"]),
            str(doc["corpus_sha256"]),
        )


RULE = (
    "families = sorted corpus families; random.Random(seed).shuffle(families); validation families = "
    "shuffled[0::3]; validation rows = rows of a validation family or measured on the held-out chip "
    "(H100, the newest chip); train rows = the rest (corpus ids 0..874, calibration_resnet50 ids from "
    "10000). Every accuracy figure is reported on validation rows only."
)


def corpus_digest(path: Path = CORPUS_CSV) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def make_split(
    rows: Iterable[CorpusRow],
    families: Iterable[str],
    *,
    seed: int = SPLIT_SEED,
    held_out_chip: str = HELD_OUT_CHIP,
    corpus_sha256: str = "",
) -> Split:
    shuffled = sorted(set(families))
    random.Random(seed).shuffle(shuffled)
    validation_families = frozenset(shuffled[0::3])
    train: set[int] = set()
    validation: set[int] = set()
    for r in rows:
        held = r.family in validation_families or r.chip == held_out_chip
        (validation if held else train).add(r.row_id)
    return Split(
        seed, held_out_chip, validation_families, frozenset(train), frozenset(validation), corpus_sha256
    )


def load_split(path: Path = SPLIT_FILE) -> Split:
    return Split.from_dict(json.loads(path.read_text()))


def write_split(split: Split, path: Path = SPLIT_FILE) -> None:
    path.write_text(json.dumps(split.to_dict(), indent=1) + "\n")


# Train rows that no GPU model should learn from, with the reason (a choice made on train rows:
# no validation row has these sources).  tlkh's times come from PyTorch Lightning's
# SimpleProfiler and carry ~50 ms of fixed framework overhead per step (a batch-1 step of a
# 6-layer RoBERTa takes 50 ms on an A100; the notes say "launch-overhead bound").
# Zeus (second corpus) publishes seconds per *epoch*; SOURCES_2.md: its images/s are derived as
# train-set size / epoch time, so they hold the data loading, the epoch's start and any
# evaluation, not a training step — the quantity the compute model fits.  (Excluded because of
# what the source measures, stated in SOURCES_2.md when the file was imported; seen on the train
# fit: with these rows the per-step overhead c₀ came out at 28 ms.)  Both stay in validation.
FIT_EXCLUDED_SOURCES = {
    "tlkh/transformers-benchmarking": "PyTorch Lightning profiler overhead (~50 ms/step)",
    "ml-energy/zeus": "seconds per epoch (data loading, epoch start, evaluation), not a training step",
}


def fit_worthy(row: CorpusRow) -> bool:
    try:
        return publisher_of(row.source) not in FIT_EXCLUDED_SOURCES
    except ValueError:  # a row without a repository (a test's) is no excluded publisher's
        return True


class SplitViolation(ValueError):
    """A validation row was about to reach a fit."""


def train_rows(rows: Sequence[CorpusRow], split: Split) -> list[CorpusRow]:
    """The rows a fit may see; raises :class:`SplitViolation` if one is validation or unknown."""
    bad = [r.row_id for r in rows if r.row_id not in split.train_ids]
    if bad:
        raise SplitViolation(f"rows {bad[:5]} are not train rows of the split")
    # A frozen test publisher's rows never reach a fit, whatever the split says (issue 34).
    return refuse_frozen(rows)


# --------------------------------------------------------------------------- publishers, LOPO
#
# Issue 34: the headline figures are leave-one-publisher-out (LOPO), and a frozen test set of
# whole publishers is never read by any fit or choice.  The second corpus
# (``catalog/fixtures/public_gpu_training_2.csv``, 399 rows from other publishers and stacks) is
# read by the benches' folds and by the shipped fit: ``calibrate_compute`` fits
# ``compute-model.json`` on every non-frozen publisher of all three files
# (:func:`all_publishers_split`), the fit each fold repeats without its publisher.

CORPUS_2_CSV = ROOT / "catalog/fixtures/public_gpu_training_2.csv"
MODELS_2_CSV = ROOT / "planner/data/corpus_models_2.csv"
FROZEN_FILE = ROOT / "planner/data/frozen_test_publishers.json"
# Rows of the second corpus get ids after the calibration rows', so one id space covers all three.
CORPUS_2_ID_OFFSET = 20_000

_GITHUB_REPO = re.compile(r"github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)")


def publisher_of(source: str) -> str:
    """The publisher of a row: the repository (or paper artifact) its figure was read from.

    Rule (written before any LOPO figure was seen): the first ``github.com/OWNER/REPO`` in the
    row's ``source`` text, as ``OWNER/REPO``; a source without a GitHub URL is refused
    (:class:`ValueError`), so every row has exactly one publisher.  So NVIDIA's README tables
    and its ResNet-50 calibration rows are one publisher (``NVIDIA/DeepLearningExamples``),
    Lambda's logs are ``lambdal/deeplearning-benchmark``, and each source of
    ``public_gpu_training_2.csv`` is its own repository (Zeus, Pollux/AdaptDL, NeuSight, …).
    A fork's figures belong to the fork that published them (``trsharm25/NeuSight``)."""
    m = _GITHUB_REPO.search(source)
    if m is None:
        raise ValueError(f"no github.com/OWNER/REPO in the source {source[:120]!r}")
    return f"{m.group(1)}/{m.group(2).removesuffix('.git')}"


def board_of(gpu: str) -> str:
    """The board name of a ``gpu`` cell without its bracketed notes
    (``"V100-PCIe (inferred)"`` → ``"V100-PCIe"``)."""
    return gpu.split(" (")[0].strip()


def precision_of(cell: str) -> str:
    """The precision of a ``precision`` cell without its notes (``"amp (fp16)"`` → ``"amp"``,
    ``"fp32 (TF32 ...)"`` → ``"fp32"``: the row is read as what it names first)."""
    return cell.split("(")[0].strip().strip(",").strip().lower()


def load_models_2(path: Path = MODELS_2_CSV) -> dict[tuple[str, str], CorpusModel]:
    """Builders of the second corpus's models (same columns as ``corpus_models.csv``)."""
    return load_models(path)


def calibration_models() -> dict[tuple[str, str], CorpusModel]:
    """The ResNet-50 calibration rows' builder, keyed like corpus models."""
    return {
        ("resnet50", "3x224x224"): CorpusModel(
            "resnet50", "3x224x224", "resnet", "torchvision:resnet50", (3, 224, 224), None, ""
        )
    }


def all_models() -> dict[tuple[str, str], CorpusModel]:
    """Every corpus builder: the second corpus's, then the first's and the calibration rows'
    (an existing key keeps the builder the shipped fit used)."""
    return {**load_models_2(), **load_models(), **calibration_models()}


def load_rows_2(
    path: Path = CORPUS_2_CSV, models: Mapping[tuple[str, str], CorpusModel] | None = None
) -> list[CorpusRow]:
    """The second corpus's rows (ids from :data:`CORPUS_2_ID_OFFSET`), boards and precisions
    read without their notes; each row keeps its ``source``."""
    models = load_models_2() if models is None else models

    def row(r: dict[str, str]) -> tuple[str, str, str]:
        instance = f" [instance {r['instance_type']}]" if r.get("instance_type") else ""
        return precision_of(r["precision"]), board_of(r["gpu"]), r["notes"] + instance

    return _read_rows(path, models, CORPUS_2_ID_OFFSET, row)


def instance_of(row: CorpusRow) -> str | None:
    """The EC2 instance type a second-corpus row names (``[instance …]`` in its notes)."""
    m = re.search(r"\[instance ([a-z0-9.]+)\]", row.notes)
    return m.group(1) if m else None


def load_all_rows() -> list[CorpusRow]:
    """Every row the benches validate on: both corpora and the ResNet-50 calibration rows."""
    models = all_models()
    return load_rows(models=models) + load_calibration_rows() + load_rows_2(models=models)


@dataclass(frozen=True)
class Frozen:
    """The frozen test set: whole publishers that no fit and no choice may read."""

    seed: int
    publishers: frozenset[str]

    def holds(self, row: CorpusRow) -> bool:
        try:
            return publisher_of(row.source) in self.publishers
        except ValueError:  # a row without a repository (a test's) is no frozen publisher's
            return False


FROZEN_SEED = 34
FROZEN_RULE = (
    "Chosen before any leave-one-publisher-out figure was computed. publishers = publisher_of(source) "
    "of every row of public_gpu_training.csv, calibration_resnet50_single_gpu.csv and "
    "public_gpu_training_2.csv; eligible = the publishers of public_gpu_training_2.csv only (those of the "
    "first corpus were already read by the shipped compute-model.json, so they cannot be a clean test); "
    "k = round(len(publishers) / 5); frozen = sorted(eligible) shuffled by random.Random(34), first k. "
    "No fit (calibrate_compute, the benches' folds) and no choice of a parameter or a form may read "
    "these rows; benches report them once per run, separately, at the end. No parameter or form is "
    "chosen after looking at validation or test rows."
)


def choose_frozen(rows: Iterable[CorpusRow], eligible: Iterable[str], seed: int = FROZEN_SEED) -> Frozen:
    """The rule of :data:`FROZEN_RULE` applied to ``rows`` (all publishers) and ``eligible``."""
    publishers = {publisher_of(r.source) for r in rows}
    k = round(len(publishers) / 5)
    pool = sorted(set(eligible))
    random.Random(seed).shuffle(pool)
    return Frozen(seed, frozenset(pool[:k]))


def load_frozen(path: Path = FROZEN_FILE) -> Frozen:
    doc = json.loads(path.read_text())
    return Frozen(int(doc["seed"]), frozenset(doc["publishers"]))


def write_frozen(frozen: Frozen, all_publishers: Iterable[str], path: Path = FROZEN_FILE) -> None:
    doc = {
        "rule": FROZEN_RULE,
        "seed": frozen.seed,
        "publishers": sorted(frozen.publishers),
        "all_publishers": sorted(set(all_publishers)),
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


class FrozenViolation(SplitViolation):
    """A row of a frozen test publisher was about to reach a fit."""


def refuse_frozen(rows: Sequence[CorpusRow], frozen: Frozen | None = None) -> list[CorpusRow]:
    """``rows`` unchanged; raises :class:`FrozenViolation` if one is a frozen publisher's."""
    frozen = load_frozen() if frozen is None else frozen
    bad = [r.row_id for r in rows if frozen.holds(r)]
    if bad:
        raise FrozenViolation(f"rows {bad[:5]} belong to a frozen test publisher")
    return list(rows)


def all_publishers_split(rows: Sequence[CorpusRow], frozen: Frozen) -> Split:
    """The shipped fit's split: train = every row of every publisher that is not frozen."""
    train = {r.row_id for r in rows if not frozen.holds(r)}
    return Split(0, "", frozenset(), frozenset(train), frozenset(), "all non-frozen publishers")


def lopo_split(rows: Sequence[CorpusRow], left_out: str, frozen: Frozen) -> Split:
    """One leave-one-publisher-out fold as a :class:`Split`: train = every row of another
    publisher that is not frozen; validation = the left-out publisher's rows (frozen rows are
    in neither)."""
    train = {r.row_id for r in rows if not frozen.holds(r) and publisher_of(r.source) != left_out}
    held = {r.row_id for r in rows if not frozen.holds(r) and publisher_of(r.source) == left_out}
    return Split(0, "", frozenset(), frozenset(train), frozenset(held), f"lopo:{left_out}")
