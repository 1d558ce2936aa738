"""Record what a kernel launch would compile (argument types, ``tl.constexpr`` values, warps) instead of running it.

A ``@triton.jit`` kernel is compiled once per combination of its argument types and constexpr values
(and launch options such as ``num_warps``): ``softmax`` on rows of 100 columns and on rows of 4,097
are two different GPU programs (``BLOCK = 128`` and ``8192``). To compile every program a wrapper
launches, take the configurations from the wrapper itself: inside ``captured_launches()``, under
Triton's interpreter, each launch is recorded as a ``CapturedLaunch`` and returns at once without
running (the wrapper's output is left as allocated). The wrapper's own input checks and its choice
of block sizes run as usual, so the record is exactly what it would launch on a GPU.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["CapturedLaunch", "captured_launches", "triton_type"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_TORCH_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
                "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


@dataclass(frozen=True)
class CapturedLaunch:
    """One launch: the kernel's name and source file, its signature and constexprs, its options."""

    kernel: str
    source_file: str
    signature: dict[str, str]
    constexprs: dict[str, object]
    options: dict[str, int] = field(default_factory=dict)


def triton_type(value: object) -> str:
    """Triton's name for the type of a launch argument: ``*fp32`` for a float32 tensor, ``i32`` for an int..."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        name = str(dtype).replace("torch.", "")
        if name not in _TORCH_TYPES:
            raise TypeError(f"no Triton type for a tensor of {dtype}")
        return "*" + _TORCH_TYPES[name]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for a launch argument of type {type(value).__name__}")


def _constexpr_names(function) -> set[str]:
    annotations = inspect.get_annotations(function)
    return {name for name, annotation in annotations.items() if "constexpr" in str(annotation)}


@contextmanager
def captured_launches() -> Iterator[list[CapturedLaunch]]:
    """Inside the block, kernel launches are recorded in the yielded list and not run (module docstring).

    Needs Triton's interpreter (``TRITON_INTERPRET=1``, which ``course_lib.kernels`` sets on a machine
    without a GPU): that is where a launch passes through Python with its arguments intact.
    """
    from triton.runtime import interpreter

    launches: list[CapturedLaunch] = []
    original = interpreter.InterpretedFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        if warmup:
            return None
        function = self.fn
        constexpr_names = _constexpr_names(function)
        bound = inspect.signature(function).bind(*args, **{k: v for k, v in kwargs.items()
                                                          if k not in LAUNCH_OPTIONS})
        signature, constexprs = {}, {}
        for name, value in bound.arguments.items():
            if name in constexpr_names:
                signature[name] = "constexpr"
                constexprs[name] = value
            else:
                signature[name] = triton_type(value)
        options = {name: int(kwargs[name]) for name in LAUNCH_OPTIONS if kwargs.get(name) is not None}
        launches.append(CapturedLaunch(function.__name__, inspect.getsourcefile(function) or "", signature,
                                       constexprs, options))
        return None

    interpreter.InterpretedFunction.run = record
    try:
        yield launches
    finally:
        interpreter.InterpretedFunction.run = original
