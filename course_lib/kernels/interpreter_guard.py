"""A memory guard for Triton's CPU interpreter: every load and store must stay inside a tensor argument.

On a GPU, a kernel that reads past the end of a tensor gets whatever happens to lie there (or an
"illegal memory access" that kills the process), and one that writes past the end silently
corrupts another tensor. Triton's interpreter is no safer: it turns each pointer into a raw address
and reads or writes it with numpy, so a missing mask corrupts the Python process's heap and crashes
it later, far from the bug.

``install()`` makes the interpreter check every access instead. When a kernel is launched, the
guard records the memory each tensor argument spans (from its first to its last element, strides
included); every load, store and atomic whose mask is on must then fall inside one of those spans.
An access that does not raises ``OutOfBoundsAccess`` naming the kernel, the program, the access
and the nearest argument, e.g.::

    OutOfBoundsAccess: kernel add_kernel, program (3, 0, 0): load outside every tensor argument:
    24 of 256 active lanes, the first at x_ptr + 1000, 1 element past its last element
    (x_ptr: [1000] float32, x_ptr + 0 to x_ptr + 999). Mask the lanes that fall past the end ...

The span of a *view* is the view's own elements, not its whole storage: a kernel handed
``buffer[:1000]`` may not read element 1000 even though the buffer has it. Masked-off lanes are
never checked, exactly as a GPU never touches them.

``course_lib.kernels`` installs the guard whenever the interpreter runs. It costs a few numpy
comparisons per access (a few percent of the interpreter's own overhead) and changes nothing for
a correct kernel.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["OutOfBoundsAccess", "install", "is_installed", "launch_count"]


class OutOfBoundsAccess(RuntimeError):
    """A kernel under the interpreter touched memory outside every tensor argument of its launch."""


@dataclass(frozen=True)
class _Span:
    """The bytes ``[start, end)`` that one tensor argument spans."""

    name: str
    start: int
    end: int
    description: str  # e.g. "[1000] float32"
    itemsize: int


class _LaunchState(threading.local):
    def __init__(self) -> None:
        self.kernel_name: str | None = None
        self.spans: list[_Span] | None = None


_launch = _LaunchState()
_installed = False
_launches = 0


def is_installed() -> bool:
    """Whether ``install()`` has patched the interpreter in this process."""
    return _installed


def launch_count() -> int:
    """Kernel launches the interpreter has run in this process since ``install()`` (a check can tell
    from it whether a function really ran a Triton kernel)."""
    return _launches


def _tensor_span(name: str, tensor) -> _Span:
    """The byte range ``tensor`` covers: its first element to the end of its last one."""
    itemsize = tensor.element_size()
    start = tensor.data_ptr()
    if tensor.numel() == 0:
        end = start
    else:
        last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        end = start + (last + 1) * itemsize
    description = f"{list(tensor.shape)} {str(tensor.dtype).replace('torch.', '')}"
    return _Span(name, start, end, description, itemsize)


def _spans_of(arg_names, args, kwargs) -> list[_Span]:
    named = list(zip(arg_names, args)) + list(kwargs.items())
    spans = []
    for name, value in named:
        values = value if isinstance(value, tuple) else (value,)
        for index, item in enumerate(values):
            base = getattr(item, "base", item)  # triton's TensorWrapper (reinterpreted dtypes) keeps the tensor here
            if hasattr(base, "data_ptr") and hasattr(base, "element_size"):
                label = name if len(values) == 1 else f"{name}[{index}]"
                spans.append(_tensor_span(label, base))
    return spans


def _describe_miss(addresses: np.ndarray, spans: list[_Span]) -> str:
    """Where the first stray address lies, as an offset from the nearest tensor argument's pointer.

    Offsets count elements from the pointer the kernel received, as the kernel's own pointer
    arithmetic does (``x_ptr + offsets``): "x_ptr + 1000 ... 1 element past its last element
    (x_ptr: [1000] float32, x_ptr + 0 to x_ptr + 999)".
    """
    address = int(addresses[0])
    if not spans:
        return "the launch has no tensor arguments"
    nearest = min(spans, key=lambda span: min(abs(address - span.start), abs(address - span.end)))
    offset = (address - nearest.start) // nearest.itemsize
    last = (nearest.end - nearest.start) // nearest.itemsize - 1
    if address >= nearest.end:
        distance = offset - last
        where = f"{distance} element{'s' if distance != 1 else ''} past its last element"
    else:
        distance = -offset
        where = f"{distance} element{'s' if distance != 1 else ''} before its first element"
    at = f"{nearest.name} + {offset}" if offset >= 0 else f"{nearest.name} - {-offset}"
    return (f"at {at}, {where} ({nearest.name}: {nearest.description}, "
            f"{nearest.name} + 0 to {nearest.name} + {last})")


def _check(kind: str, pointers, mask, element_size: int) -> None:
    spans = _launch.spans
    if spans is None:
        return  # a device function called outside a guarded launch
    addresses = pointers.data  # numpy uint64 addresses, one per lane
    if mask is not None:
        active = mask.data
        if not active.all():
            addresses = addresses[np.broadcast_to(active, addresses.shape)]
    if addresses.size == 0:
        return
    lowest, highest = int(addresses.min()), int(addresses.max()) + element_size
    for span in spans:
        if span.start <= lowest and highest <= span.end:
            return  # the common case: the whole access lies in one argument
    addresses = addresses.ravel().astype(np.uint64)
    inside = np.zeros(addresses.shape, dtype=bool)
    for span in spans:
        inside |= (addresses >= span.start) & (addresses + element_size <= span.end)
    if inside.all():
        return
    stray = addresses[~inside]
    raise OutOfBoundsAccess(
        f"kernel {_launch.kernel_name}, program {_program_index()}: {kind} outside every tensor argument: "
        f"{stray.size} of {addresses.size} active lanes, the first {_describe_miss(stray, spans)}. "
        "Mask the lanes that fall past the end (for example mask=offsets < n) or check the offset arithmetic "
        "(strides, block ids, the program's start)."
    )


def _program_index() -> tuple[int, int, int] | None:
    from triton.runtime import interpreter

    index = interpreter.interpreter_builder.grid_idx
    return None if index is None else tuple(int(i) for i in index)


def _element_size(pointers) -> int:
    """Bytes of one element behind these pointers (1 when the type has no bit width, e.g. a pointer)."""
    element_type = pointers.get_element_ty()
    return max(1, getattr(element_type, "primitive_bitwidth", 8) // 8)


def install() -> None:
    """Patch Triton's interpreter so every memory access is checked (idempotent).

    Written against the interpreter of Triton 3.9 (the version ``pyproject.toml`` pins) and checked with
    3.6's (the GPU machine's, ``benchmarks/gpu_check.sh``); with a Triton whose interpreter lacks the
    patched methods it does nothing and ``is_installed()`` stays False.
    """
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    needed = ("InterpreterBuilder", "GridExecutor")
    methods = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if not all(hasattr(interpreter, name) for name in needed) or not all(
            hasattr(interpreter.InterpreterBuilder, name) for name in methods):
        return  # another Triton than the pinned one: run unguarded rather than break every import
    builder_class = interpreter.InterpreterBuilder
    original_load = builder_class.create_masked_load
    original_store = builder_class.create_masked_store
    original_rmw = builder_class.create_atomic_rmw
    original_cas = builder_class.create_atomic_cas
    original_call = interpreter.GridExecutor.__call__

    # The arguments after the checked ones differ between Triton versions (3.6 passes a cache modifier
    # and an eviction policy, 3.9 one cache policy): they go through untouched.
    def create_masked_load(self, ptrs, mask, *rest):
        _check("load", ptrs, mask, _element_size(ptrs))
        return original_load(self, ptrs, mask, *rest)

    def create_masked_store(self, ptrs, value, mask, *rest):
        _check("store", ptrs, mask, _element_size(ptrs))
        return original_store(self, ptrs, value, mask, *rest)

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, *rest):
        _check("atomic", ptr, mask, _element_size(ptr))
        return original_rmw(self, rmw_op, ptr, val, mask, *rest)

    def create_atomic_cas(self, ptr, cmp, val, *rest):
        _check("atomic compare-and-swap", ptr, None, _element_size(ptr))
        return original_cas(self, ptr, cmp, val, *rest)

    def guarded_call(self, *args, **kwargs):
        global _launches
        _launches += 1
        previous = (_launch.kernel_name, _launch.spans)
        _launch.kernel_name = getattr(self.fn, "__name__", "kernel")
        _launch.spans = _spans_of(self.arg_names, args, kwargs)
        try:
            return original_call(self, *args, **kwargs)
        finally:
            _launch.kernel_name, _launch.spans = previous

    builder_class.create_masked_load = create_masked_load
    builder_class.create_masked_store = create_masked_store
    builder_class.create_atomic_rmw = create_atomic_rmw
    builder_class.create_atomic_cas = create_atomic_cas
    interpreter.GridExecutor.__call__ = guarded_call
    _installed = True
