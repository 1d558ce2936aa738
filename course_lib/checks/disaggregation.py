"""Checks for Lab 0.2, chapter 5, part 3: how long moving a KV cache between pools takes.

The student's ``kv_transfer_ms(num_tokens, num_layers, num_kv_heads, head_dim, bytes_per_element,
link_gb_per_s, latency_ms)`` returns milliseconds:

    bytes = num_tokens * 2 (K and V) * num_layers * num_kv_heads * head_dim * bytes_per_element
    ms    = latency_ms + bytes / (link_gb_per_s * 1e9) * 1000        (GB = 10**9 bytes)

The reference is :func:`course_lib.sim.disaggregation.kv_transfer_ms` on the bytes per token.
"""

from __future__ import annotations

import math
from typing import Callable

from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, short_repr
from course_lib.checks.fixtures import recorded_check, reference
from course_lib.sim.disaggregation import kv_transfer_ms

__all__ = ["check_kv_transfer_ms", "reference_kv_transfer_ms"]

register_reference_names("reference_kv_transfer_ms")

# The relative tolerance: float rounding only; every unit mistake is off by a factor >= 1.07.
RELATIVE_TOLERANCE = 1e-6


_reference_transfer = reference(kv_transfer_ms)


def reference_kv_transfer_ms(num_tokens: int, num_layers: int, num_kv_heads: int, head_dim: int,
                             bytes_per_element: float, link_gb_per_s: float, latency_ms: float = 0.0) -> float:
    """Milliseconds to copy ``num_tokens`` tokens of KV cache over a link of ``link_gb_per_s`` GB/s."""
    kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * bytes_per_element
    return _reference_transfer(num_tokens, kv_bytes_per_token, link_gb_per_s, latency_ms)


def _hint(got: float, expected: float, latency_ms: float) -> str:
    without_latency = expected - latency_ms
    if without_latency > 0:
        ratio = (got - latency_ms) / without_latency
        for factor, hint in (
            (0.5, "the cache holds K *and* V: 2 tensors per layer."),
            (1e-3, "the answer is in milliseconds: seconds * 1000."),
            (1e3, "link_gb_per_s is in gigabytes per second (1e9 bytes/s), and the result in ms."),
            (2**30 / 1e9, "GB/s means 10**9 bytes per second here, not 2**30 (GiB)."),
            (1e9 / 2**30, "GB/s means 10**9 bytes per second here, not 2**30 (GiB)."),
            (8.0, "bytes_per_element is already in bytes; no factor of 8 is needed."),
            (1 / 8, "bytes_per_element is already in bytes; no factor of 8 is needed."),
        ):
            if math.isclose(ratio, factor, rel_tol=1e-3):
                return hint
    if math.isclose(got, without_latency, rel_tol=1e-6) and latency_ms:
        return "add latency_ms: every transfer pays the fixed start-up latency once."
    return ("bytes = num_tokens * 2 * num_layers * num_kv_heads * head_dim * bytes_per_element; "
            "ms = latency_ms + bytes / (link_gb_per_s * 1e9) * 1000.")


@recorded_check
def check_kv_transfer_ms(student_kv_transfer_ms: Callable, num_tokens: int, num_layers: int, num_kv_heads: int,
                         head_dim: int, bytes_per_element: float, link_gb_per_s: float,
                         latency_ms: float = 0.0) -> None:
    """``student_kv_transfer_ms(...)`` must match the reference to a relative 1e-6."""
    require_own_implementation(student_kv_transfer_ms, "kv_transfer_ms")
    args = (num_tokens, num_layers, num_kv_heads, head_dim, bytes_per_element, link_gb_per_s, latency_ms)
    call = f"kv_transfer_ms({', '.join(short_repr(argument) for argument in args)})"
    got = call_student(student_kv_transfer_ms, call, *args, show_args=False)
    try:
        value = float(got)
    except (TypeError, ValueError):
        fail(f"{call} must return a number of milliseconds", expected="a float", got=got)
    expected = reference_kv_transfer_ms(*args)
    if math.isclose(value, expected, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12):
        return
    fail(f"{call} (milliseconds, relative tolerance {RELATIVE_TOLERANCE:g})", expected=expected, got=value,
         hint=_hint(value, expected, latency_ms))
