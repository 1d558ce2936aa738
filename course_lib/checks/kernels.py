"""Checks for Lab 0.3, chapters 1 and 2 (first Triton kernels; a fused kernel and its bytes), and
the helpers every kernel check of the lab shares.

How a kernel is checked:

- the student's Python wrapper is called with tensors the check builds (``call_student``); under
  Triton's CPU interpreter ``course_lib.kernels.interpreter_guard`` turns every out-of-bounds load
  or store into an error that names the kernel, the program and the tensor;
- the result is compared with a float64 torch computation of the same formula (``reference``),
  within the tolerance of its dtype (``course_lib.kernels.tolerances``, the table the kernels' tests
  and the GPU cells use too), written in the message;
- on a mismatch the check runs a few diagnoses (rows longer than a power of two? a strided view
  instead of a contiguous one? the numbers a typical mistake would give?) to turn "wrong" into a
  hint that names the likely cause;
- where it can (the interpreter, locally), the check also verifies that a Triton kernel really
  ran: a torch one-liner is not the exercise.

GPU checks (``*_speed``) run only on a CUDA device (``require_gpu``; the test cells are marked
``needs_gpu``). They check the output first, then time the student's kernel and a baseline in
paired, alternated runs (median of each), and reject a time below what the memory system allows
(``bytes / measured copy bandwidth``) as not credible.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

import numpy as np
import torch

from course_lib.checks import (
    call_student,
    check,
    expect_equal,
    fail,
    is_remote,
    register_reference_names,
    require_gpu,
    require_own_implementation,
)
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.kernels.tolerances import tolerance

__all__ = [
    "check_add_rmsnorm_traffic",
    "check_fused_add_rmsnorm",
    "check_fused_rmsnorm_speed",
    "check_softmax",
    "check_vector_add",
    "check_vector_add_speed",
]

register_reference_names("vector_add", "softmax", "fused_add_rmsnorm", "add_rmsnorm_traffic", "add_rmsnorm_ref",
                         "unfused_add_rmsnorm")

INTERPRETER_HINT = (
    "the kernel failed while it ran. An OutOfBoundsAccess means a load or store touched memory outside "
    "every tensor you passed: mask the lanes past the end (mask=offsets < n), and check the offsets "
    "(program id times block, strides). Other errors name the line of the kernel that failed."
)


# ---------------------------------------------------------------------------------------------
# Helpers shared by the lab's kernel checks
# ---------------------------------------------------------------------------------------------


def interpreter_hints() -> dict[type[BaseException], str]:
    """call_student hints: any exception raised while a kernel runs gets INTERPRETER_HINT."""
    hints: dict[type[BaseException], str] = {}
    try:
        from triton.runtime.errors import InterpreterError

        hints[InterpreterError] = INTERPRETER_HINT
    except ImportError:  # pragma: no cover - triton ships with the course
        pass
    from course_lib.kernels.interpreter_guard import OutOfBoundsAccess

    hints[OutOfBoundsAccess] = INTERPRETER_HINT
    return hints


def call_kernel(function: Callable, call: str, *args: Any, copy_args: bool = True, **kwargs: Any) -> Any:
    """``call_student`` for a function that launches a Triton kernel.

    Locally, under the interpreter, it also fails when no kernel was launched during the call.
    """
    from course_lib.kernels import interpreter_guard

    counting = interpreter_guard.is_installed() and not is_remote(function)
    before = interpreter_guard.launch_count()
    # The interpreter computes with numpy, which warns about overflow and 0 / 0; the checks report
    # NaN and inf themselves, with a hint, so the warnings would only be noise on stderr.
    with np.errstate(all="ignore"):
        result = call_student(function, call, *args, copy_args=copy_args, show_args=False,
                              hints=interpreter_hints(), **kwargs)
    if counting and interpreter_guard.launch_count() == before:
        fail(f"{call} returned without launching a Triton kernel", show_values=False,
             hint="the exercise is the kernel: compute the result in a @triton.jit function launched over a grid "
                  "(kernel[grid](...)), not with torch operations.")
    return result


def expect_tensor(got: Any, shape: tuple, dtype: torch.dtype, what: str, *, hint: str = "") -> torch.Tensor:
    """Fail unless ``got`` is a tensor of this shape and dtype; returns it."""
    if not isinstance(got, torch.Tensor):
        fail(f"{what} must be a torch.Tensor", expected=f"Tensor {list(shape)}", got=type(got).__name__, hint=hint or None)
    if tuple(got.shape) != tuple(shape):
        fail(f"{what} has the wrong shape", expected=list(shape), got=list(got.shape), hint=hint or None)
    if got.dtype != dtype:
        fail(f"{what} has the wrong dtype", expected=dtype, got=got.dtype,
             hint="return the result in the input's dtype (do the math in fp32 inside the kernel, convert when storing).")
    return got


def max_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference (inf where one side is not finite and the other differs)."""
    difference = (got.double() - expected.double()).abs()
    both_nan = torch.isnan(got.double()) & torch.isnan(expected.double())
    difference = torch.where(both_nan, torch.zeros_like(difference), difference)
    difference = torch.nan_to_num(difference, nan=math.inf)
    return float(difference.max()) if difference.numel() else 0.0


def is_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> bool:
    """Within the tolerance of ``dtype`` (``course_lib.kernels.tolerances``), every element finite."""
    limits = tolerance(dtype)
    rel, abs_ = limits.rtol, limits.atol
    if got.shape != expected.shape or not torch.isfinite(got).all():
        return False
    return bool(torch.allclose(got.double(), expected.double(), rtol=rel, atol=abs_))


def fail_mismatch(what: str, got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, hint: str,
                  note: str = "") -> None:
    """The house-format failure for a tensor that is not close enough to the float64 expectation
    (``note``, if given, is a sentence added after the summary)."""
    limits = tolerance(dtype)
    rel, abs_ = limits.rtol, limits.atol
    flat_got, flat_expected = got.double().flatten(), expected.double().flatten()
    bad = ~torch.isclose(flat_got, flat_expected, rtol=rel, atol=abs_)
    bad |= ~torch.isfinite(flat_got)
    index = int(bad.nonzero()[0]) if bool(bad.any()) else 0
    position = list(torch.unravel_index(torch.tensor(index), got.shape)) if got.dim() else []
    nan_note = " (the output holds NaN or inf)" if not torch.isfinite(got).all() else ""
    fail(f"{what} differs from the float64 reference by up to {max_error(got, expected):.3g}{nan_note} "
         f"(tolerance: relative {rel:g}, absolute {abs_:g}); first wrong element at {[int(i) for i in position]}."
         + (f" {note}" if note else ""),
         expected=round(float(flat_expected[index]), 6), got=round(float(flat_got[index]), 6), hint=hint)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Chapter 1: vector add
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_vector_add(student_vector_add: Callable, n: int, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> None:
    """``vector_add(x, y)`` with 1-D tensors of ``n`` elements must return exactly ``x + y`` (a new tensor),
    by launching a Triton kernel, without touching memory past the end of the tensors."""
    require_own_implementation(student_vector_add, "vector_add")
    generator = _generator(seed)
    x = torch.randn(n, generator=generator).to(dtype)
    y = torch.randn(n, generator=generator).to(dtype)
    call = f"vector_add(x, y) with {n} elements of {str(dtype).replace('torch.', '')}"
    got = call_kernel(student_vector_add, call, x, y)
    expected = reference(_torch_add)(x, y)
    expect_tensor(got, (n,), dtype, f"the result of {call}", hint="return a new tensor of x's shape and dtype.")
    if torch.equal(got, expected):
        return
    wrong = (got != expected).nonzero().flatten()
    first, last = int(wrong[0]), int(wrong[-1])
    hint = ("out[i] = x[i] + y[i] for every i: the program with id p handles elements p * BLOCK ... p * BLOCK + "
            "BLOCK - 1, and the grid needs ceil(n / BLOCK) programs.")
    if first > 0 and last == n - 1:
        hint = (f"elements {first} to {n - 1} (the end of the tensor) are wrong, the start is right: does the grid "
                "have enough programs (triton.cdiv(n, BLOCK), rounding up), and does the last one handle its "
                "partial block with the mask?")
    fail(f"{call}: {wrong.numel()} of {n} elements differ from x + y, first at index {first}",
         expected=float(expected[first]), got=float(got[first]), hint=hint)


def _torch_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


# ---------------------------------------------------------------------------------------------
# Chapter 1: row-wise softmax
# ---------------------------------------------------------------------------------------------


def _softmax_inputs(num_rows: int, num_cols: int, seed: int, scale: float, dtype: torch.dtype, strided: bool):
    generator = _generator(seed)
    if strided:
        # Every other row of a wider matrix: rows are 2 * (num_cols + 5) elements apart in memory.
        wide = torch.randn(2 * num_rows, num_cols + 5, generator=generator) * scale
        return wide.to(dtype)[::2, :num_cols]
    return (torch.randn(num_rows, num_cols, generator=generator) * scale).to(dtype)


def _softmax_float64(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def _zero_padded_softmax(x: torch.Tensor) -> torch.Tensor:
    """What a kernel computes if its padding lanes load 0 instead of -inf (BLOCK = next power of two)."""
    num_cols = x.shape[-1]
    pad = (1 << max(num_cols - 1, 0).bit_length()) - num_cols
    padded = torch.cat([x.double(), torch.zeros(x.shape[0], pad, dtype=torch.float64)], dim=-1)
    return torch.softmax(padded, dim=-1)[:, :num_cols]


@recorded_check
def check_softmax(student_softmax: Callable, num_rows: int, num_cols: int, *, seed: int = 0, scale: float = 1.0,
                  dtype: torch.dtype = torch.float32, strided: bool = False) -> None:
    """``softmax(x)`` of a ``[num_rows, num_cols]`` tensor (``strided``: a view whose rows are not adjacent in
    memory) must match the float64 softmax of every row, by launching a Triton kernel."""
    require_own_implementation(student_softmax, "softmax")
    x = _softmax_inputs(num_rows, num_cols, seed, scale, dtype, strided)
    layout = "every other row of a wider matrix" if strided else "contiguous"
    call = (f"softmax(x) for x [{num_rows}, {num_cols}] {str(dtype).replace('torch.', '')} ({layout}, "
            f"values up to about {3 * scale:g})")
    got = call_kernel(student_softmax, call, x, copy_args=False)
    expected = reference(_softmax_float64)(x)
    expect_tensor(got, (num_rows, num_cols), dtype, f"the result of {call}")
    if is_close(got, expected, dtype):
        return
    hint = ("each row: subtract the row's max, exp, divide by the sum of the row's exps; the padding lanes of the "
            "last block must not count (load them as -inf).")
    if not torch.isfinite(got).all():
        hint = ("the result holds NaN or inf: exp of a large number overflows. Subtract the row's max before exp "
                "(exp(x - max) is at most 1), and make sure padding lanes load -inf, not garbage.")
    elif num_cols & (num_cols - 1) and is_close(got, _zero_padded_softmax(x), dtype):
        hint = ("this is the softmax of the row padded with zeros up to a power of two: the padding lanes loaded 0, "
                "and exp(0 - max) is not 0. Load them with other=float('-inf'), whose exp is exactly 0.")
    elif strided and is_close(call_kernel(student_softmax, call, x.contiguous()), expected, dtype):
        hint = (f"right for a contiguous x, wrong for this view (row stride {x.stride(0)}, not {num_cols}): find row "
                "r at x_ptr + r * x.stride(0), passing the stride to the kernel, and the output row with its own stride.")
    fail_mismatch(call, got, expected, dtype, hint)


# ---------------------------------------------------------------------------------------------
# Chapter 2: the bytes of the residual add + RMSNorm
# ---------------------------------------------------------------------------------------------


def _reference_traffic(num_tokens: int, hidden: int, bytes_per_element: float) -> tuple[float, float]:
    from course_lib.kernels.rmsnorm import add_rmsnorm_traffic

    return add_rmsnorm_traffic(num_tokens, hidden, bytes_per_element)


def _measured_unfused_bytes(num_tokens: int, hidden: int, dtype: torch.dtype) -> int:
    """The unfused torch version's traffic, measured operation by operation on meta tensors."""
    from course_lib.kernels.byte_counter import count_bytes
    from course_lib.kernels.rmsnorm import unfused_add_rmsnorm

    def meta(*shape):
        return torch.empty(*shape, dtype=dtype, device="meta")

    return count_bytes(unfused_add_rmsnorm, meta(num_tokens, hidden), meta(num_tokens, hidden), meta(hidden), 1e-5).total


PROBES = ((0, 0), (1, 0), (0, 1), (1, 1))
"""(extra tokens, extra hidden) of the sizes at which a wrong count is compared with the rule, to tell
which kind of term it gets wrong (a T*H term, a T term, an H term) without showing the rule."""


def _term_difference(differences: list[float], num_tokens: int, hidden: int) -> tuple[float, float, float, float]:
    """(a, c, d, e) with difference(T, H) = a*T*H + c*T + d*H + e, from the differences at PROBES."""
    at, more_tokens, more_hidden, both = differences
    a = both - more_tokens - more_hidden + at
    c = more_tokens - at - a * hidden
    d = more_hidden - at - a * num_tokens
    e = at - a * num_tokens * hidden - c * num_tokens - d * hidden
    return a, c, d, e


def _describe_terms(terms: tuple[float, float, float, float]) -> str | None:
    """'T*H + T elements too few' (or '2*T too many and H too few') for whole numbers of elements; None
    if the difference is not that simple."""
    if not all(math.isfinite(term) and abs(term - round(term)) < 1e-6 for term in terms):
        return None
    groups: dict[str, list[str]] = {"too many": [], "too few": []}
    for count, name in zip((round(term) for term in terms), ("T*H", "T", "H", "")):
        if count:
            size = abs(count)
            text = str(size) if not name else (name if size == 1 else f"{size}*{name}")
            groups["too many" if count > 0 else "too few"].append(text)
    described = [f"{' + '.join(parts)}{' elements' if index == 0 else ''} {sign}"
                 for index, (sign, parts) in enumerate((sign, parts) for sign, parts in groups.items() if parts)]
    return " and ".join(described) or None


def _traffic_diagnosis(student_traffic: Callable, which: int, num_tokens: int, hidden: int, bytes_per_element: float,
                       expected_at_probes: list[tuple[float, float]]) -> str | None:
    """Which terms (in elements) the student's count of ``which`` (0 unfused, 1 fused) gets wrong, or None."""
    differences = []
    for (extra_tokens, extra_hidden), expected in zip(PROBES, expected_at_probes):
        tokens, size = num_tokens + extra_tokens, hidden + extra_hidden
        got = call_student(student_traffic, f"add_rmsnorm_traffic({tokens}, {size}, {bytes_per_element})", tokens, size,
                           bytes_per_element, show_args=False)
        try:
            differences.append((float(got[which]) - float(expected[which])) / bytes_per_element)
        except (TypeError, ValueError, IndexError, KeyError):
            return None
    return _describe_terms(_term_difference(differences, num_tokens, hidden))


@recorded_check
def check_add_rmsnorm_traffic(student_traffic: Callable, num_tokens: int, hidden: int, bytes_per_element: float,
                              *, measure: bool = False) -> None:
    """``add_rmsnorm_traffic(num_tokens, hidden, bytes_per_element)`` must return ``(unfused_bytes, fused_bytes)``
    by the chapter's counting rule; with ``measure`` the unfused count is also compared with the bytes
    ``count_bytes`` measures on ``unfused_add_rmsnorm`` (needs bytes_per_element 2 or 4)."""
    require_own_implementation(student_traffic, "add_rmsnorm_traffic")
    call = f"add_rmsnorm_traffic({num_tokens}, {hidden}, {bytes_per_element})"
    got = call_student(student_traffic, call, num_tokens, hidden, bytes_per_element, show_args=False)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (unfused_bytes, fused_bytes)", expected="(number, number)", got=got)
    unfused, fused = got
    # The rule at a few neighbouring sizes too (always, so the kit's recording has them): a wrong count
    # is then described by the kind of term it gets wrong, never by the rule itself.
    at_probes = [reference(_reference_traffic)(num_tokens + extra_tokens, hidden + extra_hidden, bytes_per_element)
                 for extra_tokens, extra_hidden in PROBES]
    expected_unfused, expected_fused = at_probes[0]
    rows, element = num_tokens * hidden, bytes_per_element
    elements_hint = (f"these are elements, not bytes: multiply the count by bytes_per_element ({bytes_per_element:g} "
                     "here).")
    if not _same_number(fused, expected_fused):
        hint = "the fused kernel reads x, residual and weight once and writes out and the new residual once."
        if element != 1 and _same_number(fused, expected_fused / element):
            hint = elements_hint
        elif _same_number(fused, (3 * rows + hidden) * element):
            hint = ("one write is missing: the fused kernel writes TWO rows per token, the normalized output and "
                    "the updated residual (the next layer adds to it).")
        elif _same_number(fused, 4 * rows * element) or _same_number(fused, (4 * rows + num_tokens * hidden) * element):
            hint = "the weight [hidden] is read once for the whole launch in this counting rule: H elements, not T*H or 0."
        elif (terms := _traffic_diagnosis(student_traffic, 1, num_tokens, hidden, element, at_probes)) is not None:
            hint = f"your fused count has {terms} (each times bytes per element). " + hint
        fail(f"{call}: fused bytes", expected=expected_fused, got=fused, hint=hint)
    if not _same_number(unfused, expected_unfused):
        hint = ("add up each torch operation of unfused_add_rmsnorm (count_bytes(...).table() in section 2 lists "
                "them): each reads its tensor inputs once and writes its output once; a [T, H] tensor is T*H "
                "elements, a [T, 1] one T, the weight H; times bytes per element.")
        if element != 1 and _same_number(unfused, expected_unfused / element):
            hint = elements_hint
        elif (terms := _traffic_diagnosis(student_traffic, 0, num_tokens, hidden, element, at_probes)) is not None:
            hint = (f"your unfused count has {terms} (each times bytes per element): look for the "
                    "operation whose inputs or output have that shape. " + hint)
        fail(f"{call}: unfused bytes", expected=expected_unfused, got=unfused, hint=hint)
    if measure:
        dtype = {2: torch.bfloat16, 4: torch.float32}.get(bytes_per_element)
        check(dtype is not None, "measure=True needs bytes_per_element 2 or 4")
        measured = reference(_measured_unfused_bytes)(num_tokens, hidden, dtype)
        expect_equal(unfused, measured, f"{call}: unfused bytes against count_bytes(unfused_add_rmsnorm, ...) on "
                                        f"{str(dtype).replace('torch.', '')} tensors",
                     hint="your formula should agree with the measurement exactly.")


def _same_number(got: Any, expected: float) -> bool:
    try:
        return math.isclose(float(got), float(expected), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# Chapter 2: the fused kernel
# ---------------------------------------------------------------------------------------------


def _rmsnorm_inputs(num_tokens: int, hidden: int, seed: int, dtype: torch.dtype, strided: bool, scale: float):
    generator = _generator(seed)
    x = torch.randn(num_tokens, hidden, generator=generator) * scale
    residual = torch.randn(num_tokens, hidden, generator=generator) * scale
    weight = 1.0 + 0.5 * torch.randn(hidden, generator=generator)
    if strided:
        # Rows of a wider activation matrix, as when x is a slice of a fused projection's output.
        x = torch.cat([x, torch.randn(num_tokens, 7, generator=generator)], dim=1)[:, :hidden]
    return x.to(dtype), residual.to(dtype), weight.to(dtype)


def _add_rmsnorm_float64(x, residual, weight, eps) -> tuple[torch.Tensor, torch.Tensor]:
    from course_lib.kernels.rmsnorm import add_rmsnorm_ref

    return add_rmsnorm_ref(x.double(), residual.double(), weight.double(), eps)


@recorded_check
def check_fused_add_rmsnorm(student_fused: Callable, num_tokens: int, hidden: int, *, seed: int = 0,
                            eps: float = 1e-5, dtype: torch.dtype = torch.float32, strided: bool = False,
                            scale: float = 1.0) -> None:
    """``fused_add_rmsnorm(x, residual, weight, eps)`` must return ``(out, new_residual)`` equal to the float64
    reference (``new_residual = x + residual``; ``out = RMSNorm(new_residual) * weight``), by launching a kernel."""
    require_own_implementation(student_fused, "fused_add_rmsnorm")
    x, residual, weight = _rmsnorm_inputs(num_tokens, hidden, seed, dtype, strided, scale)
    layout = f", x a strided view (row stride {x.stride(0)})" if strided else ""
    call = (f"fused_add_rmsnorm(x, residual, weight, eps={eps:g}) for [{num_tokens}, {hidden}] "
            f"{str(dtype).replace('torch.', '')}{layout}")
    got = call_kernel(student_fused, call, x, residual, weight, eps, copy_args=False)
    expected_out, expected_residual = reference(_add_rmsnorm_float64)(x, residual, weight, eps)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (out, new_residual)", expected="(Tensor, Tensor)",
             got=type(got).__name__, hint="return both tensors: the layer needs the updated residual too.")
    out, new_residual = got
    expect_tensor(new_residual, (num_tokens, hidden), dtype, f"new_residual from {call}")
    expect_tensor(out, (num_tokens, hidden), dtype, f"out from {call}")
    if strided and not (is_close(new_residual, expected_residual, dtype) and is_close(out, expected_out, dtype)):
        again = call_kernel(student_fused, call, x.contiguous(), residual, weight, eps, copy_args=False)
        if isinstance(again, (tuple, list)) and len(again) == 2 and all(
                isinstance(t, torch.Tensor) and is_close(t, e, dtype) for t, e in zip(again, (expected_out,
                                                                                         expected_residual))):
            wrong, got_wrong, expected_wrong = (("new_residual", new_residual, expected_residual)
                                                if not is_close(new_residual, expected_residual, dtype)
                                                else ("out", out, expected_out))
            fail_mismatch(f"{wrong} from {call}", got_wrong, expected_wrong, dtype,
                          f"right for a contiguous x, wrong for this strided view (x.stride(0) = {x.stride(0)}, not "
                          f"{hidden}): in the model x is a slice of a wider activation. Find row r of each tensor at "
                          "ptr + r * tensor.stride(0), passing every row stride to the kernel.")
    if not is_close(new_residual, expected_residual, dtype):
        hint = "new_residual = x + residual, element by element (stored in the input dtype)."
        fail_mismatch(f"new_residual from {call}", new_residual, expected_residual, dtype, hint)
    if is_close(out, expected_out, dtype):
        return
    hint = ("out = s / sqrt(mean(s ** 2) + eps) * weight with s = x + residual, the mean over the row's `hidden` "
            "elements, in fp32.")
    block = 1 << max(hidden - 1, 0).bit_length()
    ratios = (out.double() / expected_out).flatten()
    ratios = ratios[torch.isfinite(ratios)]
    if block != hidden and ratios.numel() and math.isclose(float(ratios.median()), math.sqrt(block / hidden), rel_tol=2e-2):
        hint = (f"every output is {math.sqrt(block / hidden):.3f} = sqrt({block} / {hidden}) times too large: the mean "
                f"of squares was divided by the block size ({block} lanes) instead of hidden ({hidden}). The padding "
                "lanes hold zeros, but they still count if you divide by BLOCK.")
    elif ratios.numel() and math.isclose(float(ratios.median()), 1.0, rel_tol=1e-3) and not torch.isfinite(out).all():
        hint = "some rows are NaN or inf: mask the loads of the padding lanes (other=0.0) before summing squares."
    fail_mismatch(f"out from {call}", out, expected_out, dtype, hint)


# ---------------------------------------------------------------------------------------------
# GPU timing checks (chapters 1, 2 and 5)
# ---------------------------------------------------------------------------------------------

CREDIBLE_FRACTION = 1.1
"""A kernel may not move its bytes faster than 1.1 times the measured copy bandwidth (a copy reads
and writes every byte; a kernel that reads more than it writes can come a little closer to the
datasheet peak than a copy, never far beyond it)."""


def paired_median_seconds(run_student: Callable[[], Any], run_baseline: Callable[[], Any], repeats: int = 30,
                          warmup: int = 3, calls_per_sample: int = 10) -> tuple[float, float]:
    """Median seconds per call of each function, timed with CUDA events in alternating pairs (student first on
    even pairs).

    Each sample times ``calls_per_sample`` back-to-back calls and divides: a Triton launch costs about 20 us
    of Python on the CPU, and a single call timed alone would charge that to the kernel (a 50 us vector add
    then looks 40% slower than ``torch.add``, whose launch costs a few us). Back to back, the CPU queues the
    next launch while the GPU runs this one, so the samples measure the kernels, which is what these checks
    compare.
    """
    for _ in range(warmup):
        run_student()
        run_baseline()
    torch.cuda.synchronize()
    student_times: list[float] = []
    baseline_times: list[float] = []
    for pair in range(repeats):
        order = [(run_student, student_times), (run_baseline, baseline_times)]
        for run, times in (order if pair % 2 == 0 else order[::-1]):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls_per_sample):
                run()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / calls_per_sample)
    return statistics.median(student_times), statistics.median(baseline_times)


def measured_copy_bandwidth() -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write), measured now on this GPU."""
    from course_lib.kernels.timing import copy_bandwidth

    return copy_bandwidth("cuda", 2**30)


def require_credible(call: str, seconds: float, num_bytes: float, copy_bytes_per_s: float) -> None:
    """Fail when ``seconds`` is shorter than moving ``num_bytes`` at CREDIBLE_FRACTION of the copy bandwidth."""
    floor = num_bytes / (CREDIBLE_FRACTION * copy_bytes_per_s)
    if seconds < floor:
        fail(f"{call} took {seconds * 1e6:.1f} us for {num_bytes / 1e6:.1f} MB: faster than this GPU's memory can "
             f"move those bytes ({floor * 1e6:.1f} us at {CREDIBLE_FRACTION:g} x the measured copy bandwidth of "
             f"{copy_bytes_per_s / 1e9:.0f} GB/s). A time this short is not credible.", show_values=False,
             hint="time the kernel itself, synchronizing before reading the clock, and do all of the work on every call.")


@recorded_check
def check_vector_add_speed(student_vector_add: Callable, n: int = 2**26, *, min_ratio: float = 0.8) -> None:
    """GPU: ``vector_add`` on ``n`` float32 elements must be correct and run at least ``min_ratio`` times as fast
    as ``torch.add`` (median of paired, alternated runs), and not faster than the memory allows."""
    require_gpu("timing vector_add")
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=generator)
    y = torch.randn(n, device="cuda", generator=generator)
    call = f"vector_add on {n:,} float32 elements (GPU)"
    got = call_kernel(student_vector_add, call, x, y, copy_args=False)
    if not isinstance(got, torch.Tensor) or not torch.equal(got, x + y):
        fail(f"{call} is not x + y on the GPU; its speed is not measured", show_values=False,
             hint="pass the CPU checks first (same code, same result on a GPU).")
    student, torch_add = paired_median_seconds(lambda: student_vector_add(x, y), lambda: torch.add(x, y))
    num_bytes = 3 * n * 4
    copy_rate = measured_copy_bandwidth()
    require_credible(call, student, num_bytes, copy_rate)
    if student > torch_add / min_ratio:
        fail(f"{call}: median {student * 1e6:.0f} us against torch.add's {torch_add * 1e6:.0f} us "
             f"({num_bytes / student / copy_rate:.0%} of the copy bandwidth)", show_values=False,
             hint="one load per input and one store per element, BLOCK of 1024 or more; no Python loop over programs.")


@recorded_check
def check_fused_rmsnorm_speed(student_fused: Callable, num_tokens: int = 8192, hidden: int = 4096, *,
                              min_speedup: float = 1.5) -> None:
    """GPU: ``fused_add_rmsnorm`` on bf16 ``[num_tokens, hidden]`` must be correct, then at least ``min_speedup``
    times faster than the unfused torch version (paired, alternated runs), and not faster than memory allows."""
    from course_lib.kernels.rmsnorm import unfused_add_rmsnorm

    require_gpu("timing fused_add_rmsnorm")
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(num_tokens, hidden, device="cuda", generator=generator).bfloat16()
    residual = torch.randn(num_tokens, hidden, device="cuda", generator=generator).bfloat16()
    weight = torch.rand(hidden, device="cuda", generator=generator).bfloat16() + 0.5
    call = f"fused_add_rmsnorm on [{num_tokens}, {hidden}] bfloat16 (GPU)"
    got = call_kernel(student_fused, call, x, residual, weight, 1e-5, copy_args=False)
    expected_out, expected_residual = _add_rmsnorm_float64(x.cpu(), residual.cpu(), weight.cpu(), 1e-5)
    try:
        out, new_residual = got
        correct = is_close(out.cpu(), expected_out, torch.bfloat16) and is_close(new_residual.cpu(), expected_residual,
                                                                                    torch.bfloat16)
    except (TypeError, ValueError, AttributeError):
        correct = False
    if not correct:
        fail(f"{call} is wrong on the GPU; its speed is not measured", show_values=False,
             hint="pass the CPU checks first.")
    student, unfused = paired_median_seconds(lambda: student_fused(x, residual, weight, 1e-5),
                                             lambda: unfused_add_rmsnorm(x, residual, weight, 1e-5))
    num_bytes = (4 * num_tokens * hidden + hidden) * 2
    copy_rate = measured_copy_bandwidth()
    require_credible(call, student, num_bytes, copy_rate)
    if student * min_speedup > unfused:
        fail(f"{call}: median {student * 1e6:.0f} us, the unfused torch version {unfused * 1e6:.0f} us: "
             f"{unfused / student:.2f}x, expected at least {min_speedup:g}x", show_values=False,
             hint="one program per row, one load of each input row and one store of each output row; the sum of "
                  "squares stays in registers.")

