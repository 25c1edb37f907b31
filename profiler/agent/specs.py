"""Turning a ``--model`` spec into an ``nn.Module``.

Two forms:

* ``torchvision:NAME`` - any torchvision classification model, built with ``weights=None``
  (no download: the agent must work offline) and ``num_classes``.
* ``package.module:factory`` (or ``path/to/file.py:factory``) - a callable returning an
  ``nn.Module``. It is called with ``num_classes=`` and/or ``input_shape=`` when its signature
  accepts them, so one factory can serve several shapes.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SpecError(ValueError):
    """The model spec cannot be resolved to a model; the message says why."""


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "torchvision" or "factory"
    target: str  # model name, or "module:attr"

    def __str__(self) -> str:
        return f"torchvision:{self.target}" if self.kind == "torchvision" else self.target


def parse_spec(text: str) -> ModelSpec:
    module, sep, attr = text.strip().rpartition(":")
    if not sep or not module or not attr:
        raise SpecError(
            f"bad model spec {text!r}: use torchvision:NAME (e.g. torchvision:resnet18) "
            "or package.module:factory (e.g. examples.tiny_model:build)"
        )
    if module == "torchvision":
        return ModelSpec("torchvision", attr)
    return ModelSpec("factory", f"{module}:{attr}")


def torchvision_classification_models() -> list[str]:
    import torchvision.models

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _build_torchvision(name: str, num_classes: int) -> Any:
    import torchvision.models

    names = torchvision_classification_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError(f"unknown torchvision classification model {name!r}{hint}")
    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name in ("inception_v3", "googlenet"):
        # Their auxiliary heads only matter for training from their own recipe; without
        # weights torchvision would also warn about init_weights.
        kwargs.update(aux_logits=False, init_weights=True)
    return torchvision.models.get_model(name, **kwargs)


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
    return obj


def _call_factory(factory: Callable[..., Any], num_classes: int, input_shape: tuple[int, ...]) -> Any:
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
    spec: str | ModelSpec, num_classes: int = 1000, input_shape: tuple[int, ...] = (3, 224, 224)
) -> Any:
    """Build the model named by ``spec`` (on CPU, in train mode)."""
    import torch.nn as nn

    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    if parsed.kind == "torchvision":
        model = _build_torchvision(parsed.target, num_classes)
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
