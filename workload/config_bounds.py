"""Bounds on ``transformers:MODEL_TYPE(key=value,...)`` overrides, checked before anything is built.

A spec's overrides are user input that decides how much a builder allocates: before these
checks ``bert(num_hidden_layers=1e300)`` made the task worker build layers for ever (+20 MB/s),
``hidden_size=1e999`` was an unhandled ``OverflowError`` and ``num_attention_heads=0`` or
``vocab_size=-5`` failed only once the model was built. Two checks, arithmetic only (no torch,
no transformers import here, nothing allocated):

1. :func:`bounded_value` - every override is a finite number; an integer field gets a whole
   number within its field's limits (:data:`INT_LIMITS`: sizes and counts at least 1, at most
   what no real model comes near), a probability (dropout) a number in [0, 1], a ratio at most
   :data:`MAX_RATIO`, any other float at most :data:`MAX_ABS_FLOAT` in magnitude.
2. :func:`estimate` / :func:`check_budget` - the memory one data-parallel replica needs to train
   at batch 1, from the config's arithmetic: parameters × :data:`TRAIN_BYTES_PER_PARAM` plus one
   sample's saved activations, compared with the largest GPU (DDP keeps a whole replica on every
   GPU, so a model that does not fit the largest GPU cannot be planned or profiled at all).

The parameter count is the standard transformer arithmetic, per layer ``q, k, v, o``
projections (``4 h²`` with multi-head attention, less with grouped KV heads) and an MLP of
``2 h × intermediate`` (× experts), plus token, position and classifier tables. Fields the
formula does not read (``embed_dim`` of Swin, ``mlp_ratio``...) scale the estimate by
``(new / default)²`` when they grow (``new / default`` for counts: layers, heads, experts,
positions): a weight matrix is at most quadratic in one size. That over-estimates rather than
under-estimates, and the refusal names those fields.

This module travels with the agent: stdlib only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The largest GPU memory in the bundled catalog: B300, 275,040 MiB (268.6 GiB) per GPU in
# catalog/fixtures/aws_gpu_instances.csv (AWS's GpuInfo, which the catalog's memory_mib keeps).
# The agent has no catalog (no Django): it uses this; the web passes the catalog's own maximum.
LARGEST_GPU_BYTES = 275_040 * 2**20
# Training state per parameter with Adam: fp32 weights 4 + gradients 4 + two moments 8 bytes.
# Mixed precision adds a half-precision copy (2 more); 16 is the least any run needs, so the
# budget refuses only models that cannot fit.
TRAIN_BYTES_PER_PARAM = 16
# Activations saved for backward per token, layer and hidden unit, in bytes: 34 for half
# precision without recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation
# in Large Transformer Models", eq. 1), leaving out the s² attention scores that the fused
# scaled-dot-product kernels do not keep.
ACTIVATION_BYTES_PER_TOKEN_UNIT = 34
# Sequence length assumed for activations when neither the input shape nor the config gives one.
DEFAULT_TOKENS = 2048
MAX_NUM_CLASSES = 1_000_000  # classifier outputs (ImageNet-21k has 21,843)
MAX_INT = 2**24  # any other integer field (token ids, chunk sizes, sample rates...)
MAX_RATIO = 64.0  # mlp_ratio, width_multiplier, expansion factors (real models: 0.25 to 8)
MAX_ABS_FLOAT = 1e12  # any other float (rope_theta reaches 1e7, masking values -1e9)


@dataclass(frozen=True)
class IntLimit:
    pattern: re.Pattern[str]
    low: int
    high: int
    what: str
    scale_power: int  # how an unmodelled growth of the field scales the parameter count


def _limit(pattern: str, low: int, high: int, what: str, power: int) -> IntLimit:
    return IntLimit(re.compile(pattern), low, high, what, power)


# First match wins (ids before sizes: ``shared_experts_intermediate_size`` is an intermediate
# size, ``video_token_id`` an id).
INT_LIMITS = (
    _limit(r"(_id|_ids|_idx|_index|^seed)$", 0, MAX_INT, "a token id or index", 0),
    _limit(
        r"intermediate|feedforward|(^|_)(ffn|ff|dff|d_ff|d_inner|n_inner|dim_ff)(_|$)",
        1,
        2**20,
        "an MLP width",
        2,
    ),
    _limit(r"vocab_size", 1, 2**22, "a vocabulary size", 1),
    _limit(
        r"position|(^|_)(max_seq_len|max_sequence_length|n_positions|n_ctx|seq_len|seq_length)$",
        1,
        2**20,
        "a sequence length",
        1,
    ),
    _limit(r"(hidden_size|_dim|^dim|d_model|n_embd|channels|embedding_size|_width)$", 1, 2**17, "a width", 2),
    _limit(r"(image_size|patch_size|window_size)$", 1, 2**16, "an image or patch size", 2),
    _limit(r"(layers?|^depth|_depth|^n_layer|num_stages|num_blocks)$", 1, 1024, "a layer count", 1),
    _limit(r"(heads?|^n_head)$", 1, 1024, "a head count", 1),
    _limit(r"experts", 1, 1024, "an expert count", 1),
)
GENERIC_INT = _limit(r"", 0, MAX_INT, "an integer field", 2)
_PROBABILITY = re.compile(r"dropout|drop_prob|drop_rate|drop_path|pdrop|layerdrop|_prob$")
_RATIO = re.compile(r"ratio|multiplier|_mult$|coefficient$")

# Fields the parameter formula reads (through the config's attribute_map, so GPT-2's n_embd is
# hidden_size): their values are modelled, not scaled.
HIDDEN = ("hidden_size", "d_model", "n_embd")  # Swin's embed_dim is its first stage only: scaled
LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
INTERMEDIATE = ("intermediate_size", "n_inner", "d_ff", "dff", "ffn_dim", "d_inner", "dim_feedforward")
MLP_RATIO = ("mlp_ratio", "expansion_ratio")
HEADS = ("num_attention_heads", "n_head", "n_heads")
KV_HEADS = ("num_key_value_heads",)
HEAD_DIM = ("head_dim",)
VOCAB = ("vocab_size",)
POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len", "n_ctx")
EXPERTS = ("num_local_experts", "num_experts")
IMAGE = ("image_size",)
GATED_ACTIVATIONS = ("silu", "swish", "swiglu")  # Llama-style MLPs: three matrices, not two
PATCH = ("patch_size",)
MODELLED = (
    HIDDEN + LAYERS + INTERMEDIATE + MLP_RATIO + HEADS + KV_HEADS + HEAD_DIM + VOCAB + POSITIONS + EXPERTS
)


class BoundError(ValueError):
    """An override or the model it makes is out of bounds; the message names the field."""


def int_limit(key: str) -> IntLimit:
    return next((lim for lim in INT_LIMITS if lim.pattern.search(key)), GENERIC_INT)


def bounded_value(key: str, value: int | float, default: int | float) -> int | float:
    """``value`` as the type the field takes, or :class:`BoundError` naming ``key``.

    ``default`` is the field's value in the default config: an integer field takes whole
    numbers (``1e3`` is 1000), and a field whose default is below the usual lower limit (``-1``
    meaning "off", ``0`` meaning "none") may also be set to that default or anything between."""
    if not math.isfinite(value):
        raise BoundError(f"{key}={value!r} is not a finite number")
    if _PROBABILITY.search(key):
        if not 0 <= value <= 1:
            raise BoundError(f"{key}={value:g} is a probability: from 0 to 1")
        return float(value)
    if isinstance(default, int):
        if value != int(value):
            raise BoundError(f"{key}={value!r} must be a whole number")
        lim = int_limit(key)
        low = min(lim.low, default)
        if not low <= value <= lim.high:
            raise BoundError(f"{key}={value:g} is {lim.what}: from {low} to {lim.high}")
        return int(value)
    if _RATIO.search(key):
        if not 0 < value <= MAX_RATIO:
            raise BoundError(f"{key}={value:g} is a ratio: more than 0 and at most {MAX_RATIO:g}")
    elif abs(value) > MAX_ABS_FLOAT:
        raise BoundError(f"{key}={value:g} is more than {MAX_ABS_FLOAT:g} in magnitude")
    return float(value)


def _int(config: Any, names: Iterable[str]) -> int:
    """The first of ``names`` that the config has as a positive integer, else 0."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _float(config: Any, names: Iterable[str]) -> float:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return 0.0


def _modelled_keys(config: Any) -> set[str]:
    """The config's own names of the fields the formula reads (GPT-2: ``n_embd``...)."""
    aliases: Mapping[str, str] = getattr(config, "attribute_map", None) or {}
    return set(MODELLED) | {aliases.get(name, name) for name in MODELLED}


@dataclass(frozen=True)
class Estimate:
    params: float
    activation_bytes: float  # one sample, half precision
    scaled_by: tuple[str, ...] = ()  # unmodelled fields that grew, as "key ×factor"

    @property
    def total_bytes(self) -> float:
        return self.params * TRAIN_BYTES_PER_PARAM + self.activation_bytes


def tokens_per_sample(config: Any, input_shape: Sequence[int] | None) -> int:
    """Tokens in one sample: a token model's input is ``(sequence_length,)``; a vision
    transformer makes ``(image / patch)² + 1`` of its image; else the config's positions."""
    if input_shape is not None and len(input_shape) == 1:
        return int(input_shape[0])
    image, patch = _int(config, IMAGE), _int(config, PATCH)
    if input_shape is not None and len(input_shape) >= 2 and patch:
        pixels = math.prod(int(d) for d in input_shape[-2:])
        return pixels // (patch * patch) + 1
    if image and patch:
        return (image // patch) ** 2 + 1
    return min(_int(config, POSITIONS), DEFAULT_TOKENS)


def estimate(
    config: Any,
    overrides: Mapping[str, int | float | bool],
    defaults: Mapping[str, Any],
    *,
    num_classes: int = 2,
    input_shape: Sequence[int] | None = None,
) -> Estimate:
    """Parameters and one sample's activation bytes of ``config`` (overrides applied)."""
    h = _int(config, HIDDEN)
    layers = _int(config, LAYERS)
    inter = _int(config, INTERMEDIATE) or int((_float(config, MLP_RATIO) or 4.0) * h)
    heads = _int(config, HEADS)
    head_dim = _int(config, HEAD_DIM) or (h // heads if heads else h)
    q = heads * head_dim if heads else h
    kv = (_int(config, KV_HEADS) or heads) * head_dim if heads else h
    attention = 2 * h * q + 2 * h * kv  # q and o: h × q each; k and v: h × kv each
    gated = str(getattr(config, "hidden_act", "")).lower() in GATED_ACTIVATIONS  # gate, up, down
    mlp = (3 if gated else 2) * h * inter * max(1, _int(config, EXPERTS))
    rotary = any(hasattr(config, name) for name in ("rope_parameters", "rope_theta", "rope_scaling"))
    positions = 0 if rotary else _int(config, POSITIONS)
    vocab = _int(config, VOCAB) * (1 if getattr(config, "tie_word_embeddings", True) else 2)  # + LM head
    params = float(layers * (attention + mlp) + (vocab + positions + num_classes) * h)
    activations = float(ACTIVATION_BYTES_PER_TOKEN_UNIT * tokens_per_sample(config, input_shape) * h * layers)
    factor, scaled = 1.0, []
    modelled = _modelled_keys(config)
    for key, value in overrides.items():
        default = defaults.get(key)
        if key in modelled or isinstance(value, bool) or not isinstance(default, int | float):
            continue
        power = int_limit(key).scale_power if isinstance(default, int) else 2 * bool(_RATIO.search(key))
        growth = value / default if default > 0 else float(value)
        if power and growth > 1:
            factor *= growth**power
            scaled.append(f"{key} ×{growth:.3g}")
    return Estimate(params * factor, activations * factor, tuple(scaled))


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_budget(est: Estimate, budget_bytes: int) -> None:
    """:class:`BoundError` when one replica cannot train on a GPU of ``budget_bytes``."""
    if est.total_bytes <= budget_bytes:
        return
    scaled = (
        f" (fields the estimate does not model, counted as growing it: {', '.join(est.scaled_by)})"
        if est.scaled_by
        else ""
    )
    raise BoundError(
        f"about {est.params / 1e9:,.2f} billion parameters x {TRAIN_BYTES_PER_PARAM} bytes (fp32 "
        f"weights, gradients and Adam's two moments) + {gib(est.activation_bytes)} of activations "
        f"for one sample is {gib(est.total_bytes)}, over the memory budget of {gib(budget_bytes)}, "
        f"the largest GPU in the catalog: data-parallel training keeps a whole replica on every "
        f"GPU{scaled}"
    )


def check_num_classes(num_classes: int) -> None:
    if not 1 <= num_classes <= MAX_NUM_CLASSES:
        raise BoundError(f"num_classes={num_classes} must be from 1 to {MAX_NUM_CLASSES}")
