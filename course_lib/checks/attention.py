"""Checks for Lab 0.2, chapter 2 (prefill): naive and tiled causal attention, and prefill's intensity.

The student's attention functions take the engine's layout for one sequence,

    q [q_len, num_q_heads, head_dim], k/v [kv_len, num_kv_heads, head_dim] -> [q_len, num_q_heads, head_dim],

causal and bottom-right aligned (query i sits at position kv_len - q_len + i). They are compared
with ``torch.nn.functional.scaled_dot_product_attention`` (an implementation outside this course),
given the key/value heads repeated for grouped-query attention and an explicit boolean mask.
Tolerances for fp32 inputs: relative 1e-4, absolute 1e-5 (the sums are reordered, so results
differ from torch's in the last bits, never by more).

The tiled version is also checked for *being tiled*, by two behaviours the check can see:

- **Its sums follow the key tiles.** An online softmax adds the tiles one after another and
  rescales the running sums at every tile, so its result depends, in the last bits, on block_k:
  with several key tiles it differs from the same call with one tile covering every key. Code that
  ignores block_k (a plain softmax over whole rows of keys, per block of queries) gives identical
  bits for every block_k, and fails.
- **No full score matrix.** Run locally, the tiled function runs under a ``TorchFunctionMode`` that
  records the storage size of every tensor a torch function returns (deterministic, unlike
  peak-memory counters); none may be as large as one head's q_len x kv_len scores. When grading,
  the student's code runs in its own kernel, where the grader cannot watch its tensors; the first
  behaviour is then the one checked.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from course_lib import roofline
from course_lib.checks import (
    call_student,
    fail,
    is_remote,
    one_thread,
    register_reference_names,
    require_own_implementation,
    short_repr,
)
from course_lib.checks.fixtures import recorded_check, reference

__all__ = [
    "ATOL",
    "RTOL",
    "check_attention_cost",
    "check_flash_attention",
    "check_flash_attention_memory",
    "check_linear_cost",
    "check_naive_attention",
    "largest_tensor_during",
    "random_qkv",
    "sdpa_reference",
]

register_reference_names(
    "naive_attention", "flash_attention", "sdpa_attention", "causal_mask", "repeat_kv_heads",
    "linear_cost", "attention_cost", "forward_cost", "sdpa_reference",
)

RTOL = 1e-4
ATOL = 1e-5

_reference_linear_cost = reference(roofline.linear_cost)
_reference_attention_cost = reference(roofline.attention_cost)


# ---------------------------------------------------------------------------------------------
# Helpers (chapter 3's checks reuse random_qkv)
# ---------------------------------------------------------------------------------------------


def random_qkv(
    q_len: int, kv_len: int, num_q_heads: int, num_kv_heads: int, head_dim: int, *, seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reproducible q [q_len, num_q_heads, head_dim] and k, v [kv_len, num_kv_heads, head_dim]."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(q_len, num_q_heads, head_dim, generator=generator)
    k = torch.randn(kv_len, num_kv_heads, head_dim, generator=generator)
    v = torch.randn(kv_len, num_kv_heads, head_dim, generator=generator)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _bottom_right_mask(q_len: int, kv_len: int) -> torch.Tensor:
    return torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)


def _sdpa(q, k, v, *, mask, scale, kv_head_of_q_head=None):
    """torch SDPA on our layout; ``kv_head_of_q_head`` [num_q_heads] says which kv head each query head reads."""
    num_q_heads, num_kv_heads = q.shape[1], k.shape[1]
    if kv_head_of_q_head is None:
        kv_head_of_q_head = torch.arange(num_q_heads) // (num_q_heads // num_kv_heads)
    keys, values = k[:, kv_head_of_q_head], v[:, kv_head_of_q_head]
    output = F.scaled_dot_product_attention(
        q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask, scale=scale
    )
    return output.transpose(0, 1)


def sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal (bottom-right) GQA attention by torch SDPA: [q_len, num_q_heads, head_dim]."""
    return _sdpa(q, k, v, mask=_bottom_right_mask(q.shape[0], k.shape[0]), scale=scale)


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=RTOL, atol=ATOL)


def _likely_mistake(got, q, k, v, scale) -> str | None:
    """Recompute the answers the usual mistakes give; return a hint when one of them matches."""
    q_len, num_q_heads, head_dim = q.shape
    kv_len, num_kv_heads, _ = k.shape
    mask = _bottom_right_mask(q_len, kv_len)
    candidates = []
    if q_len < kv_len:
        candidates.append((
            lambda: _sdpa(q, k, v, mask=torch.ones(q_len, kv_len, dtype=torch.bool).tril(), scale=scale),
            "your causal mask is aligned top-left. The queries are the LAST q_len tokens: query i sits at "
            "position kv_len - q_len + i and sees keys 0 .. kv_len - q_len + i."))
    candidates.append((lambda: _sdpa(q, k, v, mask=None, scale=scale),
                       "no causal mask was applied: query i must not see keys after its own position."))
    candidates.append((lambda: _sdpa(q, k, v, mask=mask.tril(kv_len - q_len - 1), scale=scale),
                       "each query must also see its own key (key position <= query position, not <)."))
    if scale is None:
        candidates.append((lambda: _sdpa(q, k, v, mask=mask, scale=1.0),
                           "scores must be multiplied by scale = 1 / sqrt(head_dim) (the default when scale is None)."))
        candidates.append((lambda: _sdpa(q, k, v, mask=mask, scale=1 / head_dim),
                           "the scale is 1 / sqrt(head_dim), not 1 / head_dim."))
    else:
        candidates.append((lambda: _sdpa(q, k, v, mask=mask, scale=None),
                           "use the scale argument when it is given; 1 / sqrt(head_dim) is only the default."))
    if 1 < num_kv_heads < num_q_heads:
        tiled_heads = torch.arange(num_q_heads) % num_kv_heads
        candidates.append((lambda: _sdpa(q, k, v, mask=mask, scale=scale, kv_head_of_q_head=tiled_heads),
                           "query head h reads kv head h // (num_q_heads // num_kv_heads): repeat each kv head "
                           "group_size times in a row (repeat_interleave), do not tile the heads (repeat)."))
    reference = sdpa_reference(q, k, v, scale)
    for make_candidate, hint in candidates:
        candidate = make_candidate()
        if _close(got, candidate) and not _close(candidate, reference):
            return hint
    return None


def _check_output(got, expected, call: str, q, k, v, scale, extra_hint: str | None = None) -> None:
    if not isinstance(got, torch.Tensor):
        fail(f"{call} must return a torch.Tensor", expected="Tensor", got=type(got).__name__)
    if tuple(got.shape) != tuple(expected.shape):
        fail(f"{call} returned the wrong shape", expected=tuple(expected.shape), got=tuple(got.shape),
             hint="the output has one row per query and one vector per *query* head: [q_len, num_q_heads, head_dim].")
    if got.dtype != q.dtype:
        fail(f"{call} returned the wrong dtype", expected=q.dtype, got=got.dtype,
             hint="return the result in q's dtype.")
    if not torch.isfinite(got).all():
        bad_queries = sorted({int(row) for row in torch.nonzero(~torch.isfinite(got))[:, 0].tolist()})
        first = bad_queries[0]
        hint = ("subtract the row maximum before exp, and make sure every query sees at least one key "
                "(exp(-inf - -inf) is NaN).")
        if bad_queries == [0] and q.shape[0] == k.shape[0]:
            hint = ("only query 0 came out NaN, and query 0 sits at position 0, where the only key it may see is "
                    "its own: the mask must let a query see its own key (key position <= query position, not <). "
                    "A row whose scores are all -inf gives exp(-inf - -inf) = NaN.")
        fail(f"{call} returned NaN or inf values for queries {bad_queries[:8]}", expected="finite numbers",
             got=f"query {first}: {got[first].flatten()[:6].tolist()}", hint=hint)
    if _close(got, expected):
        return
    error = (got - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    hint = _likely_mistake(got, q, k, v, scale) or extra_hint or (
        "compute softmax(q k^T * scale + mask) v per query head; compare your scores with a tiny example by hand.")
    fail(f"{call} differs from torch's scaled_dot_product_attention; largest difference {float(error.max()):.3g} "
         f"at [query {worst[0]}, head {worst[1]}, dim {worst[2]}] (tolerance: relative {RTOL:g}, absolute {ATOL:g})",
         expected=float(expected[worst]), got=float(got[worst]), hint=hint)


def _describe_call(name: str, q, k, extras: str = "") -> str:
    return (f"{name}(q {list(q.shape)}, k/v {list(k.shape)}{extras}) "
            f"[q_len={q.shape[0]}, kv_len={k.shape[0]}]")


# ---------------------------------------------------------------------------------------------
# (a) naive attention
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_naive_attention(
    student_naive_attention: Callable, q_len: int, kv_len: int, num_q_heads: int, num_kv_heads: int,
    head_dim: int, *, seed: int = 0, scale: float | None = None,
) -> None:
    """``student_naive_attention(q, k, v, scale=...)`` must match torch SDPA on random inputs of these sizes."""
    require_own_implementation(student_naive_attention, "naive_attention")
    q, k, v = random_qkv(q_len, kv_len, num_q_heads, num_kv_heads, head_dim, seed=seed)
    extras = "" if scale is None else f", scale={scale}"
    call = _describe_call("naive_attention", q, k, extras)
    kwargs = {} if scale is None else {"scale": scale}
    got = _run_own_attention(student_naive_attention, call, q.clone(), k.clone(), v.clone(), **kwargs)
    _check_output(got, sdpa_reference(q, k, v, scale), call, q, k, v, scale)


# ---------------------------------------------------------------------------------------------
# (b) tiled attention with the online softmax
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_flash_attention(
    student_flash_attention: Callable, q_len: int, kv_len: int, num_q_heads: int, num_kv_heads: int,
    head_dim: int, *, block_q: int, block_k: int, seed: int = 0, scale: float | None = None,
) -> None:
    """``student_flash_attention(q, k, v, block_q=, block_k=, scale=)`` must match torch SDPA, and, with
    more than one key tile, walk the keys tile by tile (see the module docstring)."""
    require_own_implementation(student_flash_attention, "flash_attention")
    q, k, v = random_qkv(q_len, kv_len, num_q_heads, num_kv_heads, head_dim, seed=seed)
    kwargs = {"block_q": block_q, "block_k": block_k}
    if scale is not None:
        kwargs["scale"] = scale
    extras = "".join(f", {key}={value}" for key, value in kwargs.items())
    call = _describe_call("flash_attention", q, k, extras)
    got = _run_own_attention(student_flash_attention, call, q.clone(), k.clone(), v.clone(), **kwargs)
    expected = sdpa_reference(q, k, v, scale)
    hint = None
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not _close(got, expected):
        one_tile = dict(kwargs, block_q=q_len, block_k=kv_len)
        try:
            with one_thread():
                single = student_flash_attention(q.clone(), k.clone(), v.clone(), **one_tile)
        except Exception:  # the diagnosis is best effort; the failure below stands on its own
            single = None
        if isinstance(single, torch.Tensor) and _close(single, expected):
            hint = ("with one tile covering everything your result is right, so the mistake is in how tiles "
                    "combine: when a tile raises the running max from m to m_new, multiply both the running "
                    "sum AND the accumulator by exp(m - m_new) before adding the tile; divide by the sum only "
                    "at the end; and check the tile bounds when block sizes do not divide the lengths.")
    _check_output(got, expected, call, q, k, v, scale, extra_hint=hint)
    _require_key_tiles(student_flash_attention, got, q, k, v, kwargs, call)


def _require_key_tiles(student_flash_attention: Callable, tiled: torch.Tensor, q, k, v, kwargs: dict,
                       call: str) -> None:
    """Fail when the result has the same bits with one key tile as with ``kwargs["block_k"]``-sized ones.

    An online softmax sums tile after tile and rescales at each one, so the rounding (and with it
    the last bits of most outputs) changes with the number of key tiles; a softmax over whole rows
    of keys does not depend on block_k at all.
    """
    kv_len = k.shape[0]
    if kwargs["block_k"] >= kv_len:
        return  # a single key tile either way: nothing to tell apart
    one_tile = dict(kwargs, block_k=kv_len)
    with one_thread():
        single = call_student(student_flash_attention, f"{call} with block_k={kv_len}", q.clone(), k.clone(), v.clone(),
                              copy_args=False, show_args=False, **one_tile)
    if isinstance(single, torch.Tensor) and single.shape == tiled.shape and torch.equal(single, tiled):
        fail(f"{call} gives bit for bit the same result as with one key tile (block_k={kv_len}): it does not "
             "depend on block_k, so the keys are not processed tile by tile",
             expected=f"keys in tiles of {kwargs['block_k']}, a running max, sum and accumulator per query row",
             got="a result independent of block_k",
             hint="for each block of queries, loop over blocks of block_k keys; for each, compute only that "
                  "tile's scores, update the running max m, rescale the running sum and accumulator by "
                  "exp(m_old - m_new), add the tile's exp(scores - m_new) and its weighted values; divide once "
                  "at the end. A softmax over the whole row of scores is naive attention, whatever the loop "
                  "around it.")


class _LargestTensor(TorchFunctionMode):
    """Records the largest storage (in elements) of any tensor a torch function returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest_elements = 0
        self.description = ""
        self.functions_called: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.functions_called.add(getattr(func, "__name__", ""))
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        for output in outputs:
            if isinstance(output, torch.Tensor) and output.element_size() > 0:
                elements = output.untyped_storage().nbytes() // output.element_size()
                if elements > self.largest_elements:
                    self.largest_elements = elements
                    name = getattr(func, "__name__", str(func))
                    self.description = f"{name}(...) -> tensor of shape {list(output.shape)}"
        return result


def largest_tensor_during(function: Callable, *args: Any, **kwargs: Any) -> tuple[Any, int, str]:
    """Run ``function(*args, **kwargs)``; return (its result, the largest tensor storage it created in
    elements, a description of the call that created it). Inputs count only if returned again."""
    tracker = _LargestTensor()
    with tracker:
        result = function(*args, **kwargs)
    return result, tracker.largest_elements, tracker.description


def _run_own_attention(student_function: Callable, call: str, *args: Any, **kwargs: Any) -> Any:
    """Run the student's attention; fail if it hands the work to torch's fused attention."""
    tracker = _LargestTensor()
    with one_thread(), tracker:
        result = call_student(student_function, call, *args, copy_args=False, show_args=False, **kwargs)
    if "scaled_dot_product_attention" in tracker.functions_called:
        fail(f"{call} calls torch's scaled_dot_product_attention, the function it is checked against",
             hint="compute the scores, the mask, the softmax and the weighted sum yourself.", show_values=False)
    return result


@recorded_check
def check_flash_attention_memory(
    student_flash_attention: Callable, seq_len: int = 512, *, block: int = 64, num_q_heads: int = 4,
    num_kv_heads: int = 2, head_dim: int = 16,
) -> None:
    """The tiled version, run on a prefill of ``seq_len`` tokens with ``block``-sized tiles, must be
    right, walk the keys tile by tile, and (watched locally) never create a tensor with as many
    elements as one head's score matrix (``seq_len * seq_len``), not even a full-size mask."""
    require_own_implementation(student_flash_attention, "flash_attention")
    q, k, v = random_qkv(seq_len, seq_len, num_q_heads, num_kv_heads, head_dim, seed=7)
    call = _describe_call("flash_attention", q, k, f", block_q={block}, block_k={block}")
    kwargs = {"block_q": block, "block_k": block}
    if is_remote(student_flash_attention):
        # The student's tensors live in another process: only the result and its bits can be compared.
        with one_thread():
            got = call_student(student_flash_attention, call, q.clone(), k.clone(), v.clone(), copy_args=False,
                               show_args=False, **kwargs)
        largest = 0
    else:
        with one_thread():
            got, largest, description = call_student(
                largest_tensor_during, call, student_flash_attention, q.clone(), k.clone(), v.clone(),
                copy_args=False, show_args=False, **kwargs,
            )
    full_matrix = seq_len * seq_len
    if largest >= full_matrix:
        fail(f"{call} created a tensor as large as a full {seq_len} x {seq_len} score matrix",
             expected=f"every tensor < {full_matrix} elements (tiles of {block} x {block} per head)",
             got=f"{largest} elements from {description}",
             hint="compute scores only for one block of queries against one block of keys at a time, and build "
                  "the causal mask for that tile only (from the tile's query and key positions).")
    _check_output(got, sdpa_reference(q, k, v), call, q, k, v, None, extra_hint=(
        "the tiles do not combine into the right result; the flash_attention test cells above give a more "
        "specific hint on smaller inputs."))
    _require_key_tiles(student_flash_attention, got, q, k, v, kwargs, call)


# ---------------------------------------------------------------------------------------------
# (c) FLOPs, bytes and intensity of prefill
# ---------------------------------------------------------------------------------------------


def _check_cost(got, expected: roofline.Cost, call: str, hints: dict[str, str]) -> None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (flops, bytes)", expected="(flops, bytes)", got=short_repr(got))
    for index, (part, value) in enumerate((("flops", expected.flops), ("bytes", expected.bytes))):
        try:
            ok = math.isclose(float(got[index]), value, rel_tol=1e-9)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            fail(f"{call}: wrong number of {part}", expected=value, got=got[index], hint=hints[part])


@recorded_check
def check_linear_cost(
    student_linear_cost: Callable, num_tokens: int, in_features: int, out_features: int, bytes_per_element: float,
) -> None:
    """``student_linear_cost(num_tokens, in_features, out_features, bytes_per_element)`` -> (flops, bytes)."""
    require_own_implementation(student_linear_cost, "linear_cost")
    call = f"linear_cost({num_tokens}, {in_features}, {out_features}, {bytes_per_element})"
    got = call_student(student_linear_cost, call, num_tokens, in_features, out_features, bytes_per_element,
                       show_args=False)
    expected = _reference_linear_cost(num_tokens, in_features, out_features, bytes_per_element)
    _check_cost(got, expected, call, {
        "flops": "each output number is a dot product of length in_features: in_features multiplies and adds, "
                 "2 FLOPs each, so 2 * num_tokens * in_features * out_features.",
        "bytes": "count the weights once (in * out), the inputs (tokens * in) and the outputs (tokens * out), "
                 "times bytes_per_element.",
    })


@recorded_check
def check_attention_cost(
    student_attention_cost: Callable, q_len: int, kv_len: int, num_q_heads: int, num_kv_heads: int,
    head_dim: int, bytes_per_element: float, materialize_scores: bool,
) -> None:
    """``student_attention_cost(q_len, kv_len, num_q_heads, num_kv_heads, head_dim, bytes_per_element,
    materialize_scores)`` -> (flops, bytes), with the conventions of ``course_lib.roofline``."""
    require_own_implementation(student_attention_cost, "attention_cost")
    arguments = (q_len, kv_len, num_q_heads, num_kv_heads, head_dim, bytes_per_element, materialize_scores)
    call = f"attention_cost{arguments}"
    got = call_student(student_attention_cost, call, *arguments, show_args=False)
    expected = _reference_attention_cost(q_len, kv_len, num_q_heads, num_kv_heads, head_dim, bytes_per_element,
                                         materialize_scores=materialize_scores)
    _check_cost(got, expected, call, {
        "flops": "two matrix products per query head, q k^T and p v, each 2 * q_len * kv_len * head_dim FLOPs: "
                 "4 * q_len * kv_len * num_q_heads * head_dim (count masked scores too).",
        "bytes": "read q (q_len * num_q_heads * head_dim), k and v (kv_len * num_kv_heads * head_dim each), write "
                 "the output (like q); naive attention adds 4 passes over num_q_heads * q_len * kv_len scores.",
    })
