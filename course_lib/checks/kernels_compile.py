"""Checks for Lab 0.3: does a student's kernel compile for the course's GPU (an H100), and does it fit?

The interpreter that runs the lab's kernels on a CPU executes the kernel's Python: it accepts a
``break`` in a loop, a global that is not a ``tl.constexpr``, a tile that needs more shared memory
than any GPU has, and a block of 131,072 lanes whose GPU compile never ends. ``check_compiles_for_gpu``
compiles the kernel for an H100 (``sm_90``) on the CPU, with every configuration the lab launches it
with (the argument types and ``tl.constexpr`` values of the lab's wrapper for the checks' largest
shapes, ``EXERCISES``), and reports for each one "compiles for an H100: yes" with its registers per
thread, shared memory and spills, or "no" with the compiler's reason. It fails when a configuration
does not compile (or runs past the time limit), does not fit the H100 (shared memory per block,
registers per block), or multiplies float32 tiles in TF32 (a GPU would then compute other numbers
than the interpreter: ``course_lib.kernels.tolerances``).

What is compiled is the kernel's *source*, read, never run (``course_lib.kernels.kernel_source``):

- locally (the student's notebook, ``course check``), the source of the kernel object the test cell
  passes and of the jit functions and constants it reads;
- when grading, the source of the notebook's code cells that the student's kernel ran before this
  test cell, as the grader sent them (``course_lib.checks.graded_sources``): the last top-level
  ``@triton.jit`` definition of the name. Nothing the student's code does while it runs can change
  that text, and the compile runs in the grader's sandbox with a fresh Triton cache, so the verdict
  is the compiler's on the code handed in. The check also reads the wrapper's definition and fails
  unless it launches this kernel (``add_kernel[grid](...)``), so the kernel compiled is the one the
  correctness checks ran. (A kernel made at run time, with ``exec`` say, has no definition to read:
  the check says so and fails.)
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Sequence

from course_lib.checks import fail, is_remote
from course_lib.checks.graded_sources import current as graded_sources
from course_lib.kernels.gpu_compile import BuildReport, KernelBuild, compile_kernels, local_worker
from course_lib.kernels.gpu_targets import COURSE_GPU
from course_lib.kernels.kernel_source import KernelModule, KernelSourceError, kernel_module, source_of_objects

__all__ = ["EXERCISES", "KernelExercise", "check_compiles_for_gpu"]

COMPILE_TIMEOUT_S = 60.0
"""Seconds one configuration may take to compile (the lab's kernels take one or two)."""

FLOAT_SCALARS = frozenset({"scale", "eps"})
POINTER_TYPES = {"block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "slot_mapping_ptr": "*i64",
                 "split_out_ptr": "*fp32", "split_lse_ptr": "*fp32"}
"""Pointer parameters whose data has one type whatever the kernel's dtype."""


@dataclass(frozen=True)
class KernelExercise:
    """A kernel the lab asks for: its parameters as the answer cell gives them, the function that launches
    it, and the configurations (dtype, constexprs) the lab launches it with."""

    kernel: str
    wrapper: str
    parameters: tuple[str, ...]
    configurations: tuple[tuple[str, dict[str, int]], ...]   # (dtype, constexprs)
    pointer_types: dict[str, str] = field(default_factory=dict)

    def builds(self) -> list[KernelBuild]:
        constexpr_names = set(self.configurations[0][1])
        result = []
        for dtype, constexprs in self.configurations:
            signature = {}
            for name in self.parameters:
                if name in constexpr_names:
                    signature[name] = "constexpr"
                elif name.endswith("_ptr"):
                    signature[name] = self.pointer_types.get(name, POINTER_TYPES.get(name, "*" + dtype))
                else:
                    signature[name] = "fp32" if name in FLOAT_SCALARS else "i32"
            label = ", ".join([_DTYPE_NAMES[dtype], *(f"{key}={value}" for key, value in constexprs.items())])
            result.append(KernelBuild(self.kernel, signature, dict(constexprs), label=label))
        return result


_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

_PAGED = ("q_ptr", "k_cache_ptr", "v_cache_ptr", "block_tables_ptr", "seq_lens_ptr", "scale", "stride_q_seq",
          "stride_q_head")

EXERCISES: dict[str, KernelExercise] = {exercise.kernel: exercise for exercise in (
    # Chapter 1: BLOCK = 1024 (the lab's choice); softmax's BLOCK is next_power_of_2(num_cols), up to the
    # hidden tests' 4,097 columns.
    KernelExercise("add_kernel", "vector_add", ("x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"),
                   (("fp32", {"BLOCK": 1024}), ("fp16", {"BLOCK": 1024}))),
    KernelExercise("softmax_kernel", "softmax",
                   ("out_ptr", "x_ptr", "num_cols", "stride_x_row", "stride_out_row", "BLOCK"),
                   (("fp32", {"BLOCK": 128}), ("fp32", {"BLOCK": 8192}), ("fp16", {"BLOCK": 256}))),
    # Chapter 2: SmolLM2's hidden size 576 and the hidden tests' 4,097 columns.
    KernelExercise("fused_add_rmsnorm_kernel", "fused_add_rmsnorm",
                   ("out_ptr", "residual_out_ptr", "x_ptr", "residual_ptr", "weight_ptr", "hidden", "eps",
                    "stride_x_row", "stride_residual_row", "stride_out_row", "stride_residual_out_row", "BLOCK"),
                   (("fp32", {"BLOCK": 1024}), ("fp32", {"BLOCK": 8192}), ("bf16", {"BLOCK": 1024}))),
    # Chapter 3: SmolLM2's heads (9 query, 3 KV: a group of 3 padded to 4) in blocks of 16 and 32.
    KernelExercise("paged_decode_kernel", "paged_decode_attention",
                   ("out_ptr", *_PAGED, "stride_out_seq", "stride_out_head", "stride_cache_block",
                    "stride_cache_token", "stride_cache_head", "stride_table_seq", "GROUP_SIZE", "GROUP_PAD",
                    "HEAD_DIM", "BLOCK_SIZE"),
                   (("fp32", {"GROUP_SIZE": 3, "GROUP_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}),
                    ("fp32", {"GROUP_SIZE": 3, "GROUP_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 32}),
                    ("fp16", {"GROUP_SIZE": 3, "GROUP_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}))),
    # Chapter 4: the merge of 4 and of 16 splits; the split kernel and the store as the engine runs them.
    KernelExercise("merge_splits_kernel", "merge_splits",
                   ("out_ptr", "split_out_ptr", "split_lse_ptr", "NUM_SPLITS", "SPLITS_PAD", "HEAD_DIM"),
                   (("fp32", {"NUM_SPLITS": 3, "SPLITS_PAD": 4, "HEAD_DIM": 64}),
                    ("fp32", {"NUM_SPLITS": 16, "SPLITS_PAD": 16, "HEAD_DIM": 128}))),
    KernelExercise("split_kv_kernel", "split_kv_decode_attention",
                   ("split_out_ptr", "split_lse_ptr", *_PAGED, "stride_cache_block", "stride_cache_token",
                    "stride_cache_head", "stride_table_seq", "NUM_SPLITS", "GROUP_SIZE", "GROUP_PAD", "HEAD_DIM",
                    "BLOCK_SIZE"),
                   (("fp32", {"NUM_SPLITS": 4, "GROUP_SIZE": 3, "GROUP_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}),
                    ("fp16", {"NUM_SPLITS": 4, "GROUP_SIZE": 3, "GROUP_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}))),
    KernelExercise("store_kv_kernel", "store_kv",
                   ("k_ptr", "v_ptr", "k_cache_ptr", "v_cache_ptr", "slot_mapping_ptr", "stride_k_token",
                    "stride_k_head", "stride_v_token", "stride_v_head", "stride_cache_block", "stride_cache_token",
                    "stride_cache_head", "NUM_KV_HEADS", "HEADS_PAD", "HEAD_DIM", "BLOCK_SIZE"),
                   (("fp32", {"NUM_KV_HEADS": 3, "HEADS_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}),
                    ("fp16", {"NUM_KV_HEADS": 3, "HEADS_PAD": 4, "HEAD_DIM": 64, "BLOCK_SIZE": 16}))),
)}


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------

HINT = ("the interpreter runs Python, a GPU runs what Triton's compiler makes of the kernel: keep to tl.* "
        "operations, tl.constexpr values for sizes (a global must be tl.constexpr(...)), no break/continue or "
        "early return inside loops, and tiles small enough for one program's registers and shared memory.")


def check_compiles_for_gpu(name: str, kernel: Any, wrapper: Any) -> None:
    """Lab 0.3 kernel ``name`` must compile for an H100 with every configuration the lab launches it with, fit
    the H100's limits and keep float32 products in float32; ``wrapper`` must launch it (module docstring)."""
    exercise = EXERCISES.get(name)
    if exercise is None:
        raise ValueError(f"no compile check for {name!r}; known kernels: {', '.join(EXERCISES)}")
    if kernel is None or wrapper is None:
        fail(f"{name} and {exercise.wrapper} must both be defined to be compiled", show_values=False,
             hint="run the answer cell above first.")
    graded = graded_sources()
    if graded is not None:
        cells, start_worker = list(graded.cells), graded.start_worker
    else:
        if is_remote(kernel):   # a handle with no grader behind it: nothing to read the source from
            raise RuntimeError("the student's kernel is remote but the grader gave no sources")
        cells, start_worker = _local_cells(exercise, kernel, wrapper), local_worker
    module = _module(exercise, cells)
    reports = compile_kernels(module, exercise.builds(), COURSE_GPU, timeout=COMPILE_TIMEOUT_S,
                              start_worker=start_worker, stop_at_first_failure=True)
    _judge(exercise, reports)


def _local_cells(exercise: KernelExercise, kernel: Any, wrapper: Any) -> list[str]:
    """The source a student's own objects have: the kernel's (and what it reads) and the wrapper's."""
    cells = source_of_objects({exercise.kernel: kernel})
    try:
        cells.append(textwrap.dedent(inspect.getsource(wrapper)))
    except (OSError, TypeError):
        pass   # reported by _module: no definition of the wrapper to read
    return cells


def _module(exercise: KernelExercise, cells: Sequence[str]) -> KernelModule:
    name, verdict = exercise.kernel, f"{exercise.kernel} compiles for an {COURSE_GPU.name}: no"
    try:
        module = kernel_module(cells, [name])
    except KernelSourceError as error:
        fail(f"{verdict} ({error})", show_values=False, hint=HINT)
    if _is_placeholder(module.text, name):
        raise NotImplementedError(f"{name} is not written yet (its body is the placeholder): nothing to compile")
    if module.parameters[name] != exercise.parameters:
        fail(f"{verdict}: its parameters are not the lab's, so it cannot be compiled as the lab launches it",
             expected=", ".join(exercise.parameters), got=", ".join(module.parameters[name]),
             hint="keep the parameters the answer cell gives, in that order.")
    launches = _launches(cells, exercise.wrapper)
    if launches is None:
        fail(f"{verdict}: no definition of {exercise.wrapper} at the top level of a code cell; the check reads it to "
             f"know which kernel it launches", show_values=False, hint=f"define {exercise.wrapper} with def, as given.")
    if name not in launches:
        fail(f"{verdict}: {exercise.wrapper} does not launch {name} (it launches "
             f"{', '.join(sorted(launches)) or 'no kernel'}); the kernel compiled must be the one your "
             f"{exercise.wrapper} runs", show_values=False,
             hint=f"launch it as {name}[grid](...) in {exercise.wrapper}.")
    return module


def _is_placeholder(text: str, name: str) -> bool:
    """Whether kernel ``name`` in a kernel module is the release's stub: a docstring and ``raise NotImplementedError``."""
    definition = next(node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef) and node.name == name)
    body = [statement for statement in definition.body
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))]
    return bool(body) and all(isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement)
                              for statement in body)


def _launches(cells: Sequence[str], wrapper: str) -> set[str] | None:
    """Names the last top-level definition of ``wrapper`` launches (``NAME[grid](...)``); None without one."""
    definition = None
    for cell in cells:
        try:
            tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                       for line in cell.splitlines()))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == wrapper:
                definition = node
    if definition is None:
        return None
    return {node.func.value.id for node in ast.walk(definition)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)}


def _judge(exercise: KernelExercise, reports: list[BuildReport]) -> None:
    name, gpu = exercise.kernel, COURSE_GPU
    failed = next((report for report in reports if not report.fits), None)
    if failed is not None and not failed.compiled:
        fail(f"{name} compiles for an {gpu.name}: no (for {failed.build.describe()}, {gpu.sm}: "
             f"{_reason(failed.error or '')})", show_values=False, hint=HINT)
    if failed is not None:
        fail(f"{name} compiles for an {gpu.name}: yes, but does not fit it (for {failed.build.describe()}: "
             f"{'; '.join(failed.problems)})", show_values=False,
             hint="fewer pipeline stages (num_stages) or smaller tiles: what a tl.dot, a layout change or a "
                  "pipelined load keeps in shared memory, every stage's tiles together, must fit in "
                  f"{gpu.shared_memory_per_block // 1024} KB per program.")
    tf32 = next((report for report in reports if report.tf32_products), None)
    if tf32 is not None:
        fail(f"{name} compiles for an {gpu.name}: yes, but its tl.dot multiplies float32 tiles in TF32 there "
             f"(for {tf32.build.describe()}): a GPU would give other numbers than the interpreter, off by about 1e-3",
             show_values=False, hint='pass input_precision="ieee" to tl.dot for float32 inputs, as the course\'s '
                                     'kernels do (or use the broadcast-and-sum product).')
    print(f"{name} compiles for an {gpu.name} ({gpu.sm}): yes")
    for report in reports:
        print(f"  {report.build.describe()}: {report.resources()}")


def _reason(error: str) -> str:
    """The compiler's message without Triton's reproducer dump: its first lines, at most 1,500 characters."""
    from course_lib.kernels.gpu_compile import first_lines

    return first_lines(error.split("\n\n================================================================")[0])
