"""Checks for the sampling filters of Lab 0.1, chapter 5: temperature, top-k, top-p, min-p.

The student's filters take logits ``[num_seqs, vocab]`` and one number for every row, and return a new
tensor where filtered tokens are ``-inf`` and kept tokens keep their logit. Each check runs the
student's filter on a copy of the input and compares with :mod:`course_lib.sampling`:

- ``apply_temperature``: values close to ``logits / temperature`` (fp32 tolerance below);
- the filters: the same tokens kept in every row, kept logits unchanged, the input left alone.
  Where probabilities tie at the top-p boundary, any kept set of the right size that is a "top"
  set (no dropped token more likely than a kept one) is accepted: which of two equal tokens goes
  first is a matter of sorting, not of the rule.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from course_lib import sampling
from course_lib.checks import call_student, fail, register_reference_names, require_own_implementation, smollm2
from course_lib.checks._shared import expect_raises
from course_lib.checks.fixtures import recorded_check, reference

__all__ = [
    "check_apply_temperature",
    "check_min_p_filter",
    "check_top_k_filter",
    "check_top_p_filter",
    "next_token_logits",
    "random_logits",
    "tied_logits",
]

register_reference_names("apply_temperature", "top_k_filter", "top_p_filter", "min_p_filter", "filtered_probs")

# fp32 division by the same number is exact in torch and in a student's code alike; the tolerance
# only forgives a multiplication by 1/T instead (one rounding more: relative error ~1e-7).
TEMPERATURE_RTOL = 1e-6
TEMPERATURE_ATOL = 1e-6

_reference_apply_temperature = reference(sampling.apply_temperature)
_reference_top_k_filter = reference(sampling.top_k_filter)
_reference_top_p_filter = reference(sampling.top_p_filter)
_reference_min_p_filter = reference(sampling.min_p_filter)


def random_logits(seed: int, num_seqs: int = 3, vocab_size: int = 50, scale: float = 3.0) -> torch.Tensor:
    """Reproducible fp32 logits ``[num_seqs, vocab_size]`` (normal, times ``scale``)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_seqs, vocab_size, generator=generator) * scale


def tied_logits() -> torch.Tensor:
    """Rows with ties at the boundaries the filters care about, ``[4, 6]`` fp32."""
    return torch.tensor([
        [1.0, 2.0, 2.0, 3.0, 0.0, -1.0],   # two tokens tie for second place
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],    # uniform: every token ties
        [5.0, 5.0, 1.0, 1.0, 1.0, -2.0],   # two tie for first
        [0.0, 0.0, -80.0, -90.0, -100.0, -120.0],  # tokens with probability ~1e-35 and below
    ])


@torch.inference_mode()
def next_token_logits(prompt: str) -> torch.Tensor:
    """SmolLM2's logits for the token after ``prompt``: ``[1, vocab]`` fp32 (the model of ``checks.smollm2()``)."""
    model, tokenizer = smollm2()
    ids = torch.tensor(tokenizer.encode(prompt), dtype=torch.long)
    return model(ids, logits_indices=torch.tensor([len(ids) - 1])).float()


def _run(function: Callable, name: str, logits: torch.Tensor, value: Any) -> torch.Tensor:
    """The student's ``function(logits_copy, value)``; fails on a crash, a non-tensor, a wrong shape, a changed input."""
    require_own_implementation(function, name)
    given = logits.clone()
    call = f"{name}(logits of shape {list(logits.shape)}, {value!r})"
    # ``given`` is not copied for the call: the check looks for changes to it below.
    result = call_student(function, call, given, copy.deepcopy(value), copy_args=False, show_args=False)
    if not isinstance(result, torch.Tensor):
        fail(f"{call} must return a tensor", expected="torch.Tensor", got=type(result).__name__)
    if result.shape != logits.shape:
        fail(f"{call} returned the wrong shape", expected=list(logits.shape), got=list(result.shape),
             hint="filter every row, keep the [num_seqs, vocab] shape.")
    if not torch.equal(given, logits):
        fail(f"{call} changed its input tensor", show_values=False,
             hint="return a new tensor (logits.masked_fill(...) or logits.clone()); the engine may still need the logits.")
    return result


def _compare_kept(name: str, call: str, logits: torch.Tensor, got: torch.Tensor, expected: torch.Tensor,
                  hint: str, ties_may_swap: bool = False,
                  hint_for: Callable[[list[int], list[int]], str | None] | None = None) -> None:
    """Same kept tokens (finite entries) as the reference, row by row; kept logits unchanged; dropped ones -inf.

    hint_for(expected ids, got ids): a hint for this row's mistake, when it recognizes one (else ``hint``)."""
    for row in range(logits.shape[0]):
        expected_kept = torch.isfinite(expected[row])
        got_kept = got[row] > float("-inf")
        dropped_values = got[row][~got_kept]
        if torch.isnan(got[row]).any():
            fail(f"{call}: row {row} contains NaN", show_values=False, hint=hint)
        if dropped_values.numel() and not torch.all(dropped_values == float("-inf")):
            fail(f"{call}: row {row} has dropped tokens that are not -inf", show_values=False,
                 hint="set a filtered token's logit to float('-inf'), so that softmax gives it probability 0.")
        if not torch.equal(got[row][got_kept], logits[row][got_kept]):
            fail(f"{call}: row {row} changed the logits of kept tokens", show_values=False,
                 hint="a filter only removes tokens; the logits it keeps stay exactly as they were.")
        if torch.equal(got_kept, expected_kept):
            continue
        if ties_may_swap and int(got_kept.sum()) == int(expected_kept.sum()) and got_kept.any() and (~got_kept).any():
            probs = torch.softmax(logits[row], dim=0)
            if probs[got_kept].min() >= probs[~got_kept].max():
                continue  # a different choice among tied tokens
        kept_ids = expected_kept.nonzero().flatten().tolist()
        got_ids = got_kept.nonzero().flatten().tolist()
        fail(f"{call}: row {row} keeps the wrong tokens ({len(kept_ids)} expected, {len(got_ids)} kept; "
             f"ids shown)", expected=kept_ids, got=got_ids, hint=(hint_for and hint_for(kept_ids, got_ids)) or hint)


@recorded_check
def check_apply_temperature(function: Callable, logits: torch.Tensor, temperature: float) -> None:
    """``apply_temperature(logits, T)`` is ``logits / T``; T <= 0 raises ValueError (greedy is handled elsewhere)."""
    call = f"apply_temperature(logits, {temperature!r})"
    if temperature <= 0:
        require_own_implementation(function, "apply_temperature")
        expect_raises(function, call, ValueError, logits.clone(), temperature,
                      hint="check the argument first: if temperature <= 0: raise ValueError(...). Temperature 0 "
                           "means greedy (the sampler takes the argmax and never calls this); dividing by 0 would "
                           "give inf and NaN.")
        return
    got = _run(function, "apply_temperature", logits, temperature)
    expected = _reference_apply_temperature(logits, temperature)
    if not torch.allclose(got, expected, rtol=TEMPERATURE_RTOL, atol=TEMPERATURE_ATOL):
        worst = (got - expected).abs().max().item()
        fail(f"{call} differs from logits / temperature (largest difference {worst:.3g}; "
             f"tolerance rtol={TEMPERATURE_RTOL}, atol={TEMPERATURE_ATOL})",
             expected=expected[0, :6].tolist(), got=got[0, :6].tolist(),
             hint="divide the logits by the temperature (T < 1 sharpens, T > 1 flattens); do not apply softmax here.")


@recorded_check
def check_top_k_filter(function: Callable, logits: torch.Tensor, top_k: int) -> None:
    """The k largest logits of each row survive (every token tied with the k-th too); 0 or k >= vocab: all."""
    got = _run(function, "top_k_filter", logits, top_k)
    expected = _reference_top_k_filter(logits, top_k)

    def tie_hint(expected_ids: list[int], got_ids: list[int]) -> str | None:
        if len(got_ids) == top_k < len(expected_ids) and set(got_ids) < set(expected_ids):
            return (f"ties at the k-th place all stay: tokens {expected_ids} all have a logit >= the {top_k}-th largest of "
                    f"the row, so all {len(expected_ids)} stay, not exactly {top_k}. Compare every logit with the "
                    "k-th largest VALUE (logits >= torch.topk(...).values[:, -1:]) instead of keeping the k indices "
                    "torch.topk returns (it picks one of the tied tokens arbitrarily).")
        return None

    _compare_kept("top_k_filter", f"top_k_filter(logits, {top_k})", logits, got, expected,
                  "keep every token whose logit is >= the k-th largest logit of its row (ties at the k-th place all "
                  "stay); top_k = 0 or top_k >= vocab keeps the row unchanged (torch.topk needs k <= vocab).",
                  hint_for=tie_hint)


@recorded_check
def check_top_p_filter(function: Callable, logits: torch.Tensor, top_p: float) -> None:
    """The smallest set of most likely tokens whose probability reaches top_p survives; top_p = 1: all."""
    got = _run(function, "top_p_filter", logits, top_p)
    expected = _reference_top_p_filter(logits, top_p)
    _compare_kept("top_p_filter", f"top_p_filter(logits, {top_p})", logits, got, expected,
                  "sort the probabilities in decreasing order and keep a token while the probability of the tokens "
                  "BEFORE it is < top_p: the token that crosses top_p is kept, and the most likely token always is. "
                  "top_p = 1 keeps everything, even tokens of tiny probability.", ties_may_swap=True)


@recorded_check
def check_min_p_filter(function: Callable, logits: torch.Tensor, min_p: float) -> None:
    """Tokens with probability >= min_p * (largest probability) survive; min_p = 0: all."""
    got = _run(function, "min_p_filter", logits, min_p)
    expected = _reference_min_p_filter(logits, min_p)
    _compare_kept("min_p_filter", f"min_p_filter(logits, {min_p})", logits, got, expected,
                  "compare probabilities, not logits: keep p >= min_p * max(p) in each row (softmax first); the "
                  "most likely token always stays.")
