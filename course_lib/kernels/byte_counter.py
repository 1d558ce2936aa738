"""Count the bytes that a piece of torch code moves, one operation at a time.

A memory-bound operation's time is its bytes divided by the bandwidth. To reason about fusion you
need those bytes, and the simplest honest count is the one a GPU's eager mode pays: every torch
operation is its own kernel, which reads each of its input tensors from memory once and writes its
output once. ``count_bytes`` runs a function under a ``TorchDispatchMode`` that sees every operation
torch dispatches and adds up exactly that:

    bytes read    = the sizes of the operation's tensor inputs
    bytes written = the sizes of its tensor outputs

Views (``unsqueeze``, ``transpose``, slicing...) move nothing and count zero. Python numbers (an
``eps`` added to a tensor) are not tensors and count zero. Caches are ignored: a real GPU may find
a small input in its L2 cache, which only makes the count an upper bound for small tensors.

Tensors on the ``meta`` device have shapes and dtypes but no data, so the count works for sizes
that would not fit in memory::

    x = torch.empty(8192, 4096, device="meta")
    traffic = count_bytes(lambda t: t * 2, x)        # traffic.total == 2 * 8192 * 4096 * 4
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["OperationBytes", "Traffic", "count_bytes"]


@dataclass(frozen=True)
class OperationBytes:
    """One dispatched operation: its name and the bytes it read and wrote."""

    name: str
    bytes_read: int
    bytes_written: int


@dataclass
class Traffic:
    """What ``count_bytes`` measured: the function's result and one entry per operation."""

    result: Any
    operations: list[OperationBytes] = field(default_factory=list)

    @property
    def bytes_read(self) -> int:
        return sum(op.bytes_read for op in self.operations)

    @property
    def bytes_written(self) -> int:
        return sum(op.bytes_written for op in self.operations)

    @property
    def total(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    def table(self) -> str:
        """The operations as an aligned text table (name, read, written)."""
        lines = [f"{'operation':<28}{'read (B)':>14}{'written (B)':>14}"]
        for op in self.operations:
            lines.append(f"{op.name:<28}{op.bytes_read:>14,}{op.bytes_written:>14,}")
        lines.append(f"{'total':<28}{self.bytes_read:>14,}{self.bytes_written:>14,}")
        return "\n".join(lines)


def _tensor_bytes(values) -> int:
    flat, _ = tree_flatten(values)
    return sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))


def _is_view(func) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write  # a view aliases its input; in-place ops write it


class _ByteCountingMode(TorchDispatchMode):
    def __init__(self, operations: list[OperationBytes]) -> None:
        super().__init__()
        self.operations = operations

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if not _is_view(func):
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            self.operations.append(OperationBytes(name, _tensor_bytes((args, kwargs)), _tensor_bytes(result)))
        return result


def count_bytes(function: Callable, *args: Any, **kwargs: Any) -> Traffic:
    """Run ``function(*args, **kwargs)`` and count the bytes each torch operation reads and writes.

    Returns a ``Traffic`` with the function's result and one ``OperationBytes`` per operation, in
    the order they ran (see the module docstring for what is counted).
    """
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}")
    operations: list[OperationBytes] = []
    with _ByteCountingMode(operations):
        result = function(*args, **kwargs)
    return Traffic(result, operations)
