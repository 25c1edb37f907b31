"""The public training-throughput corpus: rows, builders, the one train/validation split.

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
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
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


def load_rows(
    path: Path = CORPUS_CSV, models: Mapping[tuple[str, str], CorpusModel] | None = None
) -> list[CorpusRow]:
    models = load_models() if models is None else models
    rows = []
    with open(path, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            m = models.get((r["model"], r["input_shape"]))
            rows.append(
                CorpusRow(
                    i,
                    r["source"],
                    r["model"],
                    r["input_shape"],
                    r["precision"].lower(),
                    r["gpu"],
                    int(r["gpus_per_node"]),
                    int(r["nodes"]),
                    int(float(r["per_gpu_batch"])),
                    r["metric"],
                    float(r["value"]),
                    r["notes"],
                    m.family if m else "",
                )
            )
    return rows


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
FIT_EXCLUDED_SOURCES = {"tlkh/transformers-benchmarking": "PyTorch Lightning profiler overhead (~50 ms/step)"}


def fit_worthy(row: CorpusRow) -> bool:
    return not any(row.source.startswith(s) for s in FIT_EXCLUDED_SOURCES)


class SplitViolation(ValueError):
    """A validation row was about to reach a fit."""


def train_rows(rows: Sequence[CorpusRow], split: Split) -> list[CorpusRow]:
    """The rows a fit may see; raises :class:`SplitViolation` if one is validation or unknown."""
    bad = [r.row_id for r in rows if r.row_id not in split.train_ids]
    if bad:
        raise SplitViolation(f"rows {bad[:5]} are not train rows of the split")
    return list(rows)
