"""Turning a ``--model`` spec into an ``nn.Module``.

Library specs, built from the libraries' own registries (names only: no code of the caller's
runs, no weights, no network):

* ``torchvision:NAME`` - a torchvision classification model, ``weights=None``.
* ``timm:NAME`` - a ``timm.create_model`` name (``timm.list_models()``), ``pretrained=False``.
* ``transformers:MODEL_TYPE`` or ``transformers:MODEL_TYPE(key=value,...)`` - a Hugging Face
  model type (``CONFIG_MAPPING``, e.g. ``bert``, ``gpt2``, ``vit``) built from its default
  config, with optional overrides of numeric/boolean config fields (``bert(num_hidden_layers=24,
  hidden_size=1024,num_attention_heads=16,intermediate_size=4096)`` is BERT-large). Each
  override is bounded before it is set (``config_bounds``: finite, whole numbers for integer
  fields, per-field limits), and a model whose training state would not fit the largest GPU
  is refused before it is built (the web checks its catalog's largest GPU; a build on real
  memory, as in the agent, checks ``config_bounds.LARGEST_GPU_BYTES``). Head:
  encoders (types with a masked-LM head) get a sequence-classification head
  (``num_labels = num_classes``), decoders a causal-LM head, vision types an image
  classifier, anything else is the bare model. Token models take their input as floats of
  ``input_shape = (sequence_length,)`` like every other model here; ``_token_input`` maps
  them to ids in ``[0, vocab_size)`` (a few elementwise operators per token), so the profiler,
  the workload counter and the meta-device tracing serve them unchanged.

Code specs (the operator's or a team's own model code):

* ``package.module:factory`` (or ``path/to/file.py:factory``) - a callable returning an
  ``nn.Module``. It is called with ``num_classes=`` and/or ``input_shape=`` when its signature
  accepts them, so one factory can serve several shapes.

Where code may run: a code spec imports a module and calls an attribute of it, so whoever
writes the spec runs code in the process that builds it. :func:`load_model` therefore builds
code specs only with ``allow_code=True``, which the agent (on its own VM, or a local subprocess
that the operator allowed) and the operator's own commands pass; the web process and the task
worker build library specs only (:func:`check_library_spec` validates them without building).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload import config_bounds

LIBRARY_KINDS = ("torchvision", "timm", "transformers")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_HF_RE = re.compile(r"^(?P<type>[a-z0-9][a-z0-9_\-]{0,63})(?:\((?P<args>[^()]{0,400})\))?$")
_HF_ARG_RE = re.compile(
    r"^(?P<key>[a-z][a-z0-9_]{0,63})=(?P<value>true|false|-?\d{1,12}(\.\d{1,12})?(e-?\d{1,3})?)$"
)
_CODE_RE = re.compile(r"^[A-Za-z_][\w.]*(\.py)?:[A-Za-z_][\w.]*$|^[\w./\-]+\.py:[A-Za-z_][\w.]*$")


class SpecError(ValueError):
    """The model spec cannot be resolved to a model; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "torchvision", "timm", "transformers" or "factory"
    target: str  # registry name (with transformers overrides), or "module:attr"

    @property
    def is_library(self) -> bool:
        return self.kind in LIBRARY_KINDS

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}" if self.is_library else self.target


def parse_spec(text: str) -> ModelSpec:
    """The spec's kind and target, by syntax alone (nothing is imported)."""
    text = text.strip()
    kind, sep, rest = text.partition(":")
    if sep and kind in LIBRARY_KINDS:
        ok = _HF_RE.match(rest) if kind == "transformers" else _NAME_RE.match(rest)
        if not ok:
            raise SpecError(f"bad model spec {text!r}: {kind}:NAME with a name from the {kind} registry")
        return ModelSpec(kind, rest)
    module, sep, attr = text.rpartition(":")
    if not sep or not module or not attr or not _CODE_RE.match(text):
        raise SpecError(
            f"bad model spec {text!r}: use torchvision:NAME, timm:NAME, transformers:MODEL_TYPE "
            "(e.g. torchvision:resnet18) or package.module:factory (e.g. examples.tiny_model:build)"
        )
    return ModelSpec("factory", f"{module}:{attr}")


# --- library registries -----------------------------------------------------------------


def torchvision_classification_models() -> list[str]:
    import torchvision.models

    return sorted(torchvision.models.list_models(module=torchvision.models))


@functools.cache
def _registry(kind: str) -> frozenset[str]:
    if kind == "torchvision":
        return frozenset(torchvision_classification_models())
    if kind == "timm":
        try:
            import timm
        except ImportError as exc:
            raise SpecError("timm is not installed here") from exc
        return frozenset(timm.list_models())
    try:
        from transformers import CONFIG_MAPPING
    except ImportError as exc:
        raise SpecError("transformers is not installed here") from exc
    return frozenset(CONFIG_MAPPING.keys())


def _known(kind: str, name: str) -> None:
    names = _registry(kind)
    base = name.split(".", 1)[0] if kind == "timm" else name  # timm: "name.pretrained_tag"
    if base not in names:
        close = difflib.get_close_matches(base, sorted(names), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        what = {
            "torchvision": "torchvision classification model",
            "timm": "timm model",
            "transformers": "transformers model type",
        }[kind]
        raise SpecError(f"unknown {what} {base!r}{hint}")


def _hf_overrides(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    match = _HF_RE.match(spec.target)
    assert match is not None  # parse_spec checked it
    overrides: dict[str, Any] = {}
    for item in filter(None, (match["args"] or "").split(",")):
        arg = _HF_ARG_RE.match(item.strip())
        if not arg:
            raise SpecError(f"bad config override {item.strip()!r} in {spec}: key=number or key=true|false")
        value: Any = arg["value"]
        value = (
            value == "true"
            if value in ("true", "false")
            else float(value)
            if "." in value or "e" in value
            else int(value)
        )
        overrides[arg["key"]] = value
    return match["type"], overrides


def _hf_config(
    spec: ModelSpec,
    num_classes: int,
    *,
    input_shape: Sequence[int] | None = None,
    memory_budget_bytes: int | None = None,
) -> Any:
    """The spec's config with its overrides, each bounded (``config_bounds``) before it is set;
    with ``memory_budget_bytes``, also refused when one replica could not train in that memory
    (arithmetic on the config: nothing is built)."""
    from transformers import AutoConfig

    model_type, overrides = _hf_overrides(spec)
    config = AutoConfig.for_model(model_type)
    defaults: dict[str, Any] = {}
    for key, value in overrides.items():
        current = getattr(config, key, None)
        # Only existing numeric/boolean fields: no new attributes, no strings (nothing that a
        # config could turn into a file name, a module or remote code).
        if isinstance(current, bool) != isinstance(value, bool) or not isinstance(current, int | float):
            raise SpecError(f"{spec}: {key!r} is not a numeric or boolean field of the {model_type} config")
        defaults[key] = current
        if not isinstance(value, bool):
            try:
                value = config_bounds.bounded_value(key, value, current)
            except config_bounds.BoundError as exc:
                raise SpecError(f"{spec}: {exc}") from None
        setattr(config, key, value)
    try:
        config_bounds.check_num_classes(num_classes)
        if memory_budget_bytes is not None:
            est = config_bounds.estimate(
                config, overrides, defaults, num_classes=num_classes, input_shape=input_shape
            )
            config_bounds.check_budget(est, memory_budget_bytes)
    except config_bounds.BoundError as exc:
        raise SpecError(f"{spec}: {exc}") from None
    config.num_labels = num_classes
    return config


def _encoder_decoder_refused(spec: ModelSpec) -> SpecError:
    return SpecError(
        f"{spec}: encoder-decoder models need decoder inputs, which the profiler does not make yet"
    )


def _code_refused(text: str) -> SpecError:
    return SpecError(
        f"{text!r} names model code; the server builds library models only "
        "(torchvision:NAME, timm:NAME, transformers:MODEL_TYPE). Profile your own model with "
        "the agent instead: its profile carries the workload, so plans need no code"
    )


def check_library_spec(
    text: str,
    *,
    input_shape: Sequence[int] | None = None,
    memory_budget_bytes: int | None = None,
) -> ModelSpec:
    """A library spec whose name is in its registry, else :class:`SpecError` (nothing built).

    Transformers overrides are bounded field by field; with ``memory_budget_bytes`` (the web
    passes its catalog's largest GPU) the model must also fit it for training (the estimate of
    ``config_bounds``, for ``input_shape`` when given). Without it, the bounds alone keep what
    the meta-device trace of the planner builds to seconds."""
    spec = parse_spec(text)
    if not spec.is_library:
        raise _code_refused(text)
    if spec.kind == "transformers":
        model_type, _ = _hf_overrides(spec)
        _known(spec.kind, model_type)
        # A config is cheap; no model is built.
        config = _hf_config(spec, 2, input_shape=input_shape, memory_budget_bytes=memory_budget_bytes)
        if getattr(config, "is_encoder_decoder", False):
            raise _encoder_decoder_refused(spec)
    else:
        _known(spec.kind, spec.target)
    return spec


# --- builders -----------------------------------------------------------------------------


def _build_torchvision(name: str, num_classes: int) -> Any:
    import torchvision.models

    _known("torchvision", name)
    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name in ("inception_v3", "googlenet"):
        # Their auxiliary heads only matter for training from their own recipe; without
        # weights torchvision would also warn about init_weights.
        kwargs.update(aux_logits=False, init_weights=True)
    return torchvision.models.get_model(name, **kwargs)


def _build_timm(name: str, num_classes: int) -> Any:
    import timm

    _known("timm", name)
    return timm.create_model(name, pretrained=False, num_classes=num_classes)


def _token_input(model: Any) -> Any:
    """``model`` behind a float input, like every other model here.

    Token models (``main_input_name == "input_ids"``) get ``ids = ⌊|x|·997⌋ mod vocab_size``
    and an all-ones attention mask; the others get ``x`` as their main input (``pixel_values`` ...). The output is the logits,
    or the last hidden state of a bare model.
    """
    import torch.nn as nn

    class TokenInput(nn.Module):  # type: ignore[misc]  # torch is not followed by mypy: Any
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            self.vocab = int(getattr(inner.config, "vocab_size", 0) or 0)
            self.input_name = getattr(inner, "main_input_name", "input_ids")

        def forward(self, x: Any) -> Any:
            inputs = {self.input_name: x}
            if self.input_name == "input_ids":
                ids = x.detach().abs().mul(997).long().remainder(max(self.vocab, 1))
                # No attention mask: with one the model inspects its values (a branch the meta
                # device cannot take); there is no padding here.
                inputs = {"input_ids": ids}
            out = self.inner(**inputs)
            for name in ("logits", "last_hidden_state"):
                if getattr(out, name, None) is not None:
                    return getattr(out, name)
            return out[0]

    for module in model.modules():
        if hasattr(module, "warn_if_padding_and_no_attention_mask"):
            # It reads the ids' values to warn about padding, impossible on the meta device
            # (and there is no padding here).
            module.warn_if_padding_and_no_attention_mask = lambda *args, **kwargs: None
    return TokenInput(model)


def _build_budget() -> int | None:
    """The memory a built model must fit: the largest GPU's, unless it is built on the ``meta``
    device (the planner's traces), which allocates nothing; the field bounds keep that build
    to seconds, and a corpus model trained with FSDP (MPT-70B) can still be traced there."""
    import torch

    return None if torch.get_default_device().type == "meta" else config_bounds.LARGEST_GPU_BYTES


def _build_transformers(spec: ModelSpec, num_classes: int, input_shape: Sequence[int] | None = None) -> Any:
    import transformers
    from transformers.models.auto import modeling_auto

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs come from the package, never the hub
    model_type, _ = _hf_overrides(spec)
    _known("transformers", model_type)
    config = _hf_config(spec, num_classes, input_shape=input_shape, memory_budget_bytes=_build_budget())
    if getattr(config, "is_encoder_decoder", False):
        raise _encoder_decoder_refused(spec)
    # Encoders (they have a masked-LM head) fine-tune with a classification head, decoders train
    # as causal LMs, vision types classify images; anything else is the bare model.
    heads = (
        (modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, transformers.AutoModelForSequenceClassification),
        (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, transformers.AutoModelForCausalLM),
        (
            modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
            transformers.AutoModelForSequenceClassification,
        ),
        (
            modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
            transformers.AutoModelForImageClassification,
        ),
    )
    # (Any: the auto classes' from_config is unannotated in transformers)
    auto: Any = next((cls for names, cls in heads if model_type in names), transformers.AutoModel)
    try:
        model = auto.from_config(config)
    except Exception as exc:  # a type that needs sub-configs or extra inputs
        raise SpecError(f"cannot build {spec}: {type(exc).__name__}: {exc}") from exc
    return _token_input(model)


def _import_target(module_name: str) -> Any:
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        if not path.is_file():
            raise SpecError(f"model file {module_name!r} does not exist")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise SpecError(f"cannot load model file {module_name!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    # `python -m` already puts the working directory first on sys.path; a console script does not.
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SpecError(f"cannot import model module {module_name!r}: {exc}") from exc


def _resolve_factory(target: str) -> Callable[..., Any]:
    module_name, _, attr_path = target.rpartition(":")
    obj: Any = _import_target(module_name)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if not callable(obj):
        raise SpecError(f"{target!r} is not callable")
    factory: Callable[..., Any] = obj
    return factory


def _call_factory(factory: Callable[..., Any], num_classes: int, input_shape: tuple[int, ...]) -> Any:
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    if "num_classes" in params or takes_kwargs:
        kwargs["num_classes"] = num_classes
    if "input_shape" in params or takes_kwargs:
        kwargs["input_shape"] = tuple(input_shape)
    try:
        return factory(**kwargs)
    except Exception as exc:  # a factory that rejects these arguments is a bad spec for them
        name = getattr(factory, "__qualname__", repr(factory))
        raise SpecError(
            f"model factory {name}({', '.join(kwargs)}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def load_model(
    spec: str | ModelSpec,
    num_classes: int = 1000,
    input_shape: tuple[int, ...] = (3, 224, 224),
    *,
    allow_code: bool = False,
) -> Any:
    """Build the model named by ``spec`` (on CPU, in train mode).

    A code spec (``package.module:factory``) is imported and called only with
    ``allow_code=True``; without it this raises :class:`SpecError` before anything is imported.
    """
    import torch.nn as nn

    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    try:
        config_bounds.check_num_classes(num_classes)  # the classifier is num_classes x features
    except config_bounds.BoundError as exc:
        raise SpecError(f"{parsed}: {exc}") from None
    if parsed.kind == "torchvision":
        model = _build_torchvision(parsed.target, num_classes)
    elif parsed.kind == "timm":
        model = _build_timm(parsed.target, num_classes)
    elif parsed.kind == "transformers":
        model = _build_transformers(parsed, num_classes, input_shape)
    elif not allow_code:
        raise _code_refused(str(parsed))
    else:
        model = _call_factory(_resolve_factory(parsed.target), num_classes, input_shape)
    if not isinstance(model, nn.Module):
        raise SpecError(f"{parsed} returned {type(model).__name__}, not a torch.nn.Module")
    return model.train()


def logits_of(output: Any) -> Any:
    """The logits tensor of a model's output: a tensor, ``.logits``, ``["logits"]`` or ``[0]``."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, dict) and "logits" in output:
        return output["logits"]
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise SpecError(f"cannot find logits in model output of type {type(output).__name__}")
