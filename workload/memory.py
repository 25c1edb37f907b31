"""Peak-memory estimate of one training step, for ``--max-memory`` on CPU.

There is no allocator peak counter on CPU, so the agent adds up what a step keeps alive:

* parameters, their gradients and the optimizer state (SGD momentum: one buffer per
  trainable parameter), and the module buffers (e.g. BatchNorm running stats);
* the input batch and its targets;
* activations saved for backward, measured with ``torch.autograd.graph.saved_tensors_hooks``:
  every tensor autograd saves passes through the pack hook, and the bytes of the distinct
  storages that are not parameters, buffers or the input are summed. This is real, exact for
  the saved tensors, and needs only a forward pass;
* a backward transient of ``TRANSIENT_FACTOR`` x the largest saved activation: while the
  gradient flows back through the widest layer its incoming and outgoing gradients (and
  that layer's scratch) are alive at once. The factor was calibrated against the peak RSS of a
  resnet18 step on CPU (measured 2.6-3.3x), and is an approximation, not a bound.

The same forward can run on the ``meta`` device, where no memory is touched and no arithmetic
is done: shapes (and so bytes) are exact for models whose ops have meta kernels. The batch
search uses that when a real measurement at a small batch agrees with it, and falls back to
real forwards otherwise (see compute.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

TRANSIENT_FACTOR = 3


class BudgetExceeded(RuntimeError):
    """Raised from the pack hook as soon as saved activations pass the byte budget.

    Aborting mid-forward keeps a failing probe from allocating (much) more than the budget,
    which matters when ``--max-memory`` is about the machine's real memory.
    """


@dataclass
class MemoryEstimate:
    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    buffers_bytes: int
    input_bytes: int
    activations_bytes: int
    transient_bytes: int

    @property
    def static_bytes(self) -> int:
        """Everything that does not depend on the batch size."""
        return self.params_bytes + self.grads_bytes + self.optimizer_state_bytes + self.buffers_bytes

    @property
    def total_bytes(self) -> int:
        return self.static_bytes + self.input_bytes + self.activations_bytes + self.transient_bytes

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes}


@dataclass
class StaticMemory:
    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int
    buffers_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_state_bytes + self.buffers_bytes


def tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def static_memory(model: Any, momentum: bool = True) -> StaticMemory:
    """Parameter, gradient, SGD-momentum and buffer bytes of ``model`` (shared params once)."""
    params = list(model.parameters())  # parameters() already de-duplicates shared tensors
    trainable = [p for p in params if p.requires_grad]
    grads = sum(tensor_bytes(p) for p in trainable)
    return StaticMemory(
        params_bytes=sum(tensor_bytes(p) for p in params),
        grads_bytes=grads,
        optimizer_state_bytes=grads if momentum else 0,
        buffers_bytes=sum(tensor_bytes(b) for b in model.buffers()),
    )


def _storage_key(tensor: Any) -> int:
    # The StorageImpl address: equal for views of one storage, and valid on the meta device
    # (where every data_ptr is 0). Saved tensors stay alive, so keys are not reused meanwhile.
    return int(tensor.untyped_storage()._cdata)


@dataclass
class SavedTensors:
    total_bytes: int = 0
    largest_bytes: int = 0
    count: int = 0


class SavedTensorMeter:
    """Context manager: sums the activations autograd saves while it is active.

    ``exclude`` are tensors whose storages are accounted elsewhere (parameters, buffers,
    input). Raises :class:`BudgetExceeded` from inside the forward once the sum plus the
    backward transient passes ``budget_bytes``. The unpack hook is the identity, so a
    backward run after the ``with`` block is unaffected.
    """

    def __init__(self, exclude: list[Any], budget_bytes: int | None = None) -> None:
        self._excluded = {_storage_key(t) for t in exclude}
        self._seen: set[int] = set()
        self._budget = budget_bytes
        self.result = SavedTensors()
        self._hooks: Any = None

    def _pack(self, tensor: Any) -> Any:
        key = _storage_key(tensor)
        if key in self._excluded or key in self._seen:
            return tensor
        self._seen.add(key)
        nbytes = tensor.untyped_storage().nbytes()
        result = self.result
        result.total_bytes += nbytes
        result.largest_bytes = max(result.largest_bytes, nbytes)
        result.count += 1
        if (
            self._budget is not None
            and result.total_bytes + TRANSIENT_FACTOR * result.largest_bytes > self._budget
        ):
            raise BudgetExceeded(f"saved activations (plus backward transient) passed {self._budget} bytes")
        return tensor

    def __enter__(self) -> SavedTensorMeter:
        import torch

        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _identity)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        self._seen.clear()  # the keys are only unique while the graph is alive


def _identity(tensor: Any) -> Any:
    return tensor


def measure_saved_activations(
    forward: Callable[[], Any],
    exclude: list[Any],
    budget_bytes: int | None = None,
) -> SavedTensors:
    """Run ``forward()`` (it must build an autograd graph) under a :class:`SavedTensorMeter`."""
    meter = SavedTensorMeter(exclude, budget_bytes)
    with meter:
        output = forward()
    del output  # frees the graph and with it the saved tensors
    return meter.result


def estimate(static: StaticMemory, input_bytes: int, saved: SavedTensors) -> MemoryEstimate:
    return MemoryEstimate(
        params_bytes=static.params_bytes,
        grads_bytes=static.grads_bytes,
        optimizer_state_bytes=static.optimizer_state_bytes,
        buffers_bytes=static.buffers_bytes,
        input_bytes=input_bytes,
        activations_bytes=saved.total_bytes,
        transient_bytes=TRANSIENT_FACTOR * saved.largest_bytes,
    )
