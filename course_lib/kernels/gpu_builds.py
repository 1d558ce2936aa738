"""Every GPU program the course's reference kernels launch for the shapes the labs and the engine use.

CI compiles each of them for an A100 and an H100 (``tests/test_kernels_gpu_compile.py``). The
configurations are not written out by hand: each entry of ``REFERENCE_SHAPES`` calls a reference
wrapper (``softmax``, ``paged_decode_attention``...) on tensors of one shape inside
``launch_capture.captured_launches()``, so the block sizes, tile sizes, padding and warp counts are
the ones the wrapper itself picks. The shapes are those of the labs' checks (their largest rows and
blocks), of the engine (SmolLM2: 9 query heads, 3 KV heads, head_dim 64, blocks of 16 tokens; and
Llama-3-8B's 32 / 8 / 128 of the benchmarks), and each wrapper's limits (``MAX_COLS``,
``MAX_HIDDEN``, ``MAX_HEAD_DIM``, ``MAX_NUM_SPLITS``), in float32, float16 and bfloat16.

``reference_builds()`` groups them per kernel: its module (``kernel_source.KernelModule``, read from
the kernel's file) and its distinct builds. (A constexpr that only works around the interpreter takes
its GPU value: ``GPU_CONSTEXPRS``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["REFERENCE_SHAPES", "ReferenceKernel", "Shape", "reference_builds"]

DTYPES = ("float32", "float16", "bfloat16")
GPU_CONSTEXPRS = {"DOT_IN_FP32": False}
"""Constexprs that exist only for the interpreter, with the value a launch on a GPU gives them (the wrapper
captured under the interpreter passes the interpreter's)."""


@dataclass(frozen=True)
class Shape:
    """One call of a reference wrapper: a label and a function that makes the call (launches are captured)."""

    label: str
    call: Callable[[], object]


@dataclass
class ReferenceKernel:
    """A reference kernel and every distinct build the shapes launch."""

    kernel: str
    source_file: Path
    module: object          # kernel_source.KernelModule
    builds: list            # list[gpu_compile.KernelBuild]


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def _vector_add(n: int, dtype: str) -> Callable[[], object]:
    def call():
        import torch

        from course_lib.kernels.vector_add import vector_add

        x = torch.zeros(n, dtype=_torch_dtype(dtype))
        return vector_add(x, x.clone())
    return call


def _softmax(num_cols: int, dtype: str) -> Callable[[], object]:
    def call():
        import torch

        from course_lib.kernels.softmax import softmax

        return softmax(torch.zeros(2, num_cols, dtype=_torch_dtype(dtype)))
    return call


def _rmsnorm(hidden: int, dtype: str) -> Callable[[], object]:
    def call():
        import torch

        from course_lib.kernels.rmsnorm import fused_add_rmsnorm

        x = torch.zeros(2, hidden, dtype=_torch_dtype(dtype))
        return fused_add_rmsnorm(x, x.clone(), torch.ones(hidden, dtype=x.dtype))
    return call


def _decode(num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int, num_splits: int,
            dtype: str) -> Callable[[], object]:
    """paged_decode_attention (and merge_splits when num_splits > 1) on a pool of four blocks, then store_kv."""
    def call():
        import torch

        from course_lib.kernels.paged_attention import paged_decode_attention, store_kv

        kind = _torch_dtype(dtype)
        cache = torch.zeros(4, block_size, num_kv_heads, head_dim, dtype=kind)
        q = torch.zeros(1, num_q_heads, head_dim, dtype=kind)
        tables = torch.zeros(1, 4, dtype=torch.int32)
        lengths = torch.ones(1, dtype=torch.int32)
        paged_decode_attention(q, cache, cache.clone(), tables, lengths, head_dim ** -0.5, num_splits)
        new = torch.zeros(1, num_kv_heads, head_dim, dtype=kind)
        return store_kv(new, new.clone(), cache, cache.clone(), torch.zeros(1, dtype=torch.int64))
    return call


# (query heads, KV heads, head_dim, block_size, splits): SmolLM2 in the engine and the labs; Llama-3-8B
# (the benchmarks); multi-query attention with a group of 32; head_dim 256 (MAX_HEAD_DIM, the smaller
# tile) and the smallest head_dim and block size the checks build; the most splits allowed.
DECODE_SHAPES = (
    ("SmolLM2 9q/3kv/64, blocks of 16", (9, 3, 64, 16), DTYPES, (1, 4)),
    ("Llama-3-8B 32q/8kv/128, blocks of 16", (32, 8, 128, 16), DTYPES, (1, 8)),
    ("multi-query 32q/1kv/128, blocks of 32", (32, 1, 128, 32), ("bfloat16",), (1,)),
    ("head_dim 256, blocks of 16", (8, 8, 256, 16), ("float32", "bfloat16"), (1, 2)),
    ("the checks' smallest: 4q/2kv/16, blocks of 4", (4, 2, 16, 4), ("float32",), (1,)),
    ("the most splits: 9q/3kv/64, 256 splits", (9, 3, 64, 16), ("float32",), (256,)),
)


def _reference_shapes() -> list[Shape]:
    from course_lib.kernels.rmsnorm import MAX_HIDDEN
    from course_lib.kernels.softmax import MAX_COLS

    shapes = [Shape(f"vector_add, {dtype}", _vector_add(1000, dtype)) for dtype in DTYPES]
    for dtype in DTYPES:
        shapes += [Shape(f"softmax, 1 column, {dtype}", _softmax(1, dtype)),
                   Shape(f"softmax, 4,097 columns (Lab 0.3's largest), {dtype}", _softmax(4097, dtype)),
                   Shape(f"softmax, MAX_COLS = {MAX_COLS:,} columns, {dtype}", _softmax(MAX_COLS, dtype)),
                   Shape(f"fused_add_rmsnorm, hidden 576 (SmolLM2), {dtype}", _rmsnorm(576, dtype)),
                   Shape(f"fused_add_rmsnorm, hidden 4,096 (the GPU check), {dtype}", _rmsnorm(4096, dtype)),
                   Shape(f"fused_add_rmsnorm, MAX_HIDDEN = {MAX_HIDDEN:,}, {dtype}", _rmsnorm(MAX_HIDDEN, dtype))]
    for label, dims, dtypes, splits in DECODE_SHAPES:
        shapes += [Shape(f"decode, {label}, {num_splits} split{'s' if num_splits > 1 else ''}, {dtype}",
                         _decode(*dims, num_splits, dtype)) for dtype in dtypes for num_splits in splits]
    return shapes


REFERENCE_SHAPES: Callable[[], list[Shape]] = _reference_shapes


def reference_builds() -> list[ReferenceKernel]:
    """Each reference kernel with the distinct builds that ``REFERENCE_SHAPES`` launch (module docstring).

    Runs the wrappers under Triton's interpreter (``course_lib.kernels`` turns it on without a GPU).
    """
    import course_lib.kernels  # noqa: F401  (the interpreter must be on before a kernel module is imported)
    from course_lib.kernels.gpu_compile import KernelBuild
    from course_lib.kernels.kernel_source import kernel_module
    from course_lib.kernels.launch_capture import captured_launches

    found: dict[tuple[str, str], ReferenceKernel] = {}
    for shape in REFERENCE_SHAPES():
        with captured_launches() as launches:
            shape.call()
        for launch in launches:
            key = (launch.source_file, launch.kernel)
            if key not in found:
                path = Path(launch.source_file)
                found[key] = ReferenceKernel(launch.kernel, path,
                                             kernel_module([path.read_text(encoding="utf-8")], [launch.kernel]), [])
            constexprs = {name: GPU_CONSTEXPRS.get(name, value) for name, value in launch.constexprs.items()}
            build = KernelBuild(launch.kernel, launch.signature, constexprs,
                                num_warps=launch.options.get("num_warps", 4),
                                num_stages=launch.options.get("num_stages", 3), label=shape.label)
            entry = found[key]
            if not any(_same_program(build, other) for other in entry.builds):
                entry.builds.append(build)
    return list(found.values())


def _same_program(one, other) -> bool:
    return (one.signature, one.constexprs, one.num_warps, one.num_stages) == \
        (other.signature, other.constexprs, other.num_warps, other.num_stages)
