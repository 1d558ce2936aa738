"""Checks for Lab 0.4, chapters 3 to 5: the speculative sampling rule, drafts, and speculation in the engine.

Chapter 3 (``03_speculative_sampling``): the verifier takes its random numbers as arguments, so the
student's ``verify_draft`` is a deterministic function the check compares with the reference on the
same drafts, distributions and uniforms, trial by trial (drafts drawn from q, and also hand-made
corner cases: every draft kept, the first one rejected, q = 0 or p = 0 at a draft). A hidden check
also runs it as a sampler many times and applies a chi-square test to what comes out, so the
feedback can say "your tokens do not follow the target's distribution" with the evidence.

Chapter 4 (``04_drafts``): ``ngram_draft`` on hand-made and random texts; the expected-tokens and
speedup formulas against the reference.

Chapter 5 (``05_speculative_engine``): ``commit_verified`` on hand-made rounds, then (hidden) inside
the course's ``LLMEngine``, which runs in the grader and calls the student's function with plain
numbers: the outputs must equal plain greedy decoding, and after every step each running request
must hold exactly the slots of its computed tokens (measured on the engine's allocator).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import torch

from course_lib import speculative as reference_module
from course_lib.checks import (
    call_student,
    fail,
    one_thread,
    register_reference_names,
    require_own_implementation,
    short_repr,
    smollm2,
)
from course_lib.checks.fixtures import recorded_check, reference

__all__ = [
    "check_acceptance_probabilities",
    "check_chi_square",
    "check_commit_in_engine",
    "check_commit_verified",
    "check_crossover_batch_size",
    "check_expected_tokens",
    "check_ngram_draft",
    "check_residual_distribution",
    "check_verify",
    "check_verify_distribution",
    "random_distributions",
]

register_reference_names(
    "acceptance_probabilities", "residual_distribution", "verify_draft", "chi_square_statistic", "ngram_draft",
    "expected_tokens_per_step", "speculative_speedup", "commit_verified", "crossover_batch_size",
)


def random_distributions(rows: int, vocab_size: int, seed: int, *, sharpness: float = 1.5,
                         zero_fraction: float = 0.0) -> torch.Tensor:
    """Reproducible probability rows [rows, vocab] (fp64); ``zero_fraction`` of the entries set to 0."""
    generator = torch.Generator().manual_seed(seed)
    logits = sharpness * torch.randn(rows, vocab_size, generator=generator, dtype=torch.float64)
    if zero_fraction:
        zeros = torch.rand(rows, vocab_size, generator=generator) < zero_fraction
        zeros[:, 0] = False  # keep every row possible
        logits = logits.masked_fill(zeros, float("-inf"))
    return torch.softmax(logits, dim=-1)


def _as_float_tensor(value, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.tensor(value, dtype=torch.float64)
        except (TypeError, ValueError):
            fail(f"{what} must be a tensor", expected=f"tensor of shape {shape}", got=short_repr(value))
    if tuple(value.shape) != shape:
        fail(f"{what} has the wrong shape", expected=shape, got=tuple(value.shape))
    return value.double()


# ---------------------------------------------------------------------------------------------
# Chapter 3 (a), (b): acceptance probabilities and the residual
# ---------------------------------------------------------------------------------------------


def _draft_case(vocab_size: int, num_drafts: int, seed: int, zero_fraction: float = 0.0):
    """(drafts drawn from q, q [k, V], p [k + 1, V]) for one round."""
    q = random_distributions(num_drafts, vocab_size, seed, zero_fraction=zero_fraction)
    p = random_distributions(num_drafts + 1, vocab_size, seed + 1000, zero_fraction=zero_fraction)
    generator = torch.Generator().manual_seed(seed + 2000)
    drafts = torch.multinomial(q, 1, generator=generator)[:, 0].tolist() if num_drafts else []
    return drafts, q, p


@recorded_check
def check_acceptance_probabilities(student_fn: Callable, vocab_size: int, num_drafts: int, *, seed: int = 0,
                                   draft_outside_target: bool = False) -> None:
    """``acceptance_probabilities(draft_token_ids, draft_probs, target_probs) -> [k]`` = min(1, p_i(d_i) / q_i(d_i))."""
    require_own_implementation(student_fn, "acceptance_probabilities")
    drafts, q, p = _draft_case(vocab_size, num_drafts, seed)
    if draft_outside_target and num_drafts:
        p[0, drafts[0]] = 0.0  # the target never picks the first draft: it must be rejected
        p[0] /= p[0].sum()
    call = f"acceptance_probabilities({drafts}, q [{num_drafts}, {vocab_size}], p [{num_drafts + 1}, {vocab_size}])"
    got = call_student(student_fn, call, list(drafts), q.clone(), p.clone(), show_args=False)
    expected = reference(reference_module.acceptance_probabilities)(drafts, q, p).double()
    got = _as_float_tensor(got, call, (num_drafts,))
    if torch.allclose(got, expected, rtol=1e-6, atol=1e-9):
        return
    rows = torch.arange(num_drafts)
    ratio = p[rows, drafts] / q[rows, drafts]
    hint = "draft i is kept with probability min(1, p[i, d_i] / q[i, d_i]): row i of p and of q, at the draft's token."
    if bool((got > 1 + 1e-9).any()):
        hint = ("a probability above 1: p / q exceeds 1 wherever the target likes a draft more than the drafter did; "
                "the acceptance probability is min(1, p / q).")
    elif torch.allclose(got, (1 / ratio).clamp(max=1), rtol=1e-6):
        hint = "the ratio is upside down: p (the target) over q (the drafter)."
    elif num_drafts > 1 and torch.allclose(got, (p[rows + 1, drafts] / q[rows, drafts]).clamp(max=1), rtol=1e-6):
        hint = "row i of target_probs belongs with draft i (both describe the same position); do not shift it."
    fail(f"{call} gave the wrong probabilities", expected=expected.tolist(), got=got.tolist(), hint=hint)


@recorded_check
def check_residual_distribution(student_fn: Callable, vocab_size: int, *, seed: int = 0, equal: bool = False) -> None:
    """``residual_distribution(target_row, draft_row) -> [V]`` = max(p - q, 0) / its sum (p itself when p == q)."""
    require_own_implementation(student_fn, "residual_distribution")
    p = random_distributions(1, vocab_size, seed)[0]
    q = p.clone() if equal else random_distributions(1, vocab_size, seed + 1)[0]
    call = f"residual_distribution(p [{vocab_size}], q [{vocab_size}]){' with p == q' if equal else ''}"
    got = call_student(student_fn, call, p.clone(), q.clone(), show_args=False)
    expected = reference(reference_module.residual_distribution)(p, q).double()
    got = _as_float_tensor(got, call, (vocab_size,))
    if torch.allclose(got, expected, rtol=1e-6, atol=1e-9):
        return
    hint = "keep only where the target wants more than the drafter offered: max(p - q, 0), then divide by its sum."
    if equal and bool(torch.isnan(got).any()):
        hint = "when p == q the residual sums to 0: return p itself (a rejection cannot happen then) instead of 0 / 0."
    elif torch.allclose(got, (p - q).clamp(min=0), rtol=1e-6, atol=1e-9):
        hint = "normalize: divide max(p - q, 0) by its sum so the result is a distribution."
    elif torch.allclose(got, p, rtol=1e-6):
        hint = "that is p itself; the replacement must come from max(p - q, 0) (renormalized), or the output is biased."
    fail(f"{call} is not the residual distribution", expected=expected[:6].tolist(), got=got[:6].tolist(), hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 3 (c): the verifier, trial by trial and as a sampler
# ---------------------------------------------------------------------------------------------


def _hand_made_cases(vocab_size: int, num_drafts: int, seed: int):
    """Corner cases: every draft kept (the bonus token), the first rejected, a draft the target never picks."""
    drafts, q, p = _draft_case(vocab_size, num_drafts, seed)
    zeros = torch.zeros(num_drafts, dtype=torch.float64)
    ones = torch.full((num_drafts,), 0.999999, dtype=torch.float64)
    cases = [(drafts, q, p, zeros, 0.3, "every draft kept (uniforms all 0)"),
             (drafts, q, p, ones, 0.7, "uniforms just below 1 (rejections wherever the target likes a draft less)")]
    if num_drafts:
        p_never = p.clone()
        p_never[0, drafts[0]] = 0.0
        p_never[0] /= p_never[0].sum()
        cases.append((drafts, q, p_never, zeros, 0.5, "the target gives the first draft probability 0"))
    return cases


def _verify_hint(drafts, q, p, accept, sample_uniform: float, keep: torch.Tensor, expected: list[int],
                 got: list[int]) -> str:
    """What a verifier that emitted ``got`` instead of ``expected`` most likely did wrong.

    Everything here is computed from the check's own inputs and the reference's recorded results
    (``keep``), so the student kit can say it without the reference.
    """
    num_kept = len(expected) - 1
    hint = ("walk the drafts in order: keep d_i while accept_uniforms[i] < min(1, p_i(d_i) / q_i(d_i)); at the first "
            "rejection draw one token from the residual of row i with sample_with_uniform and stop; if all are kept, "
            "draw the bonus token from p_k.")
    if num_kept == len(drafts):  # every draft kept: the last token is the bonus, from row k of p
        if got == expected[:-1]:
            return ("every draft was kept, so one more token comes for free: the bonus token, sample_with_uniform(p[k], "
                    "sample_uniform). Without it each round wastes the target's last row of logits.")
        if len(got) == len(expected) and got[:-1] == expected[:-1]:
            wrong_rows = {f"p[{len(drafts) - 1}]": p[len(drafts) - 1], f"q[{len(drafts) - 1}]": q[len(drafts) - 1]}
            for name, row in wrong_rows.items():
                if len(drafts) and got[-1] == reference_module.sample_with_uniform(row, sample_uniform):
                    return (f"the bonus token comes from the target's LAST row, p[k] = p[{len(drafts)}] (its opinion "
                            f"after all k drafts), not from {name}.")
            return "the bonus token is sample_with_uniform(p[k], sample_uniform), with k = len(draft_token_ids)."
    else:
        rejected = num_kept
        u, probability = float(accept[rejected]), float(keep[rejected])
        if len(got) > rejected and got[:rejected] == expected[:rejected] and got[rejected] == drafts[rejected]:
            strict = (" The test is strict: u < probability, so a draft with acceptance probability 0 is never kept."
                      if u == probability else "")
            return (f"draft {rejected} (token {drafts[rejected]}) is rejected here: accept_uniforms[{rejected}] = {u:.4f} "
                    f"is not below its acceptance probability {probability:.4f}. A rejected draft is not emitted: the "
                    f"token drawn from the residual takes its place, and the round ends.{strict}")
        if len(got) == len(expected) and got[:-1] == expected[:-1]:
            from_target = reference_module.sample_with_uniform(p[rejected], sample_uniform)
            if got[-1] == from_target:
                return ("after a rejection, draw from the residual max(p_i - q_i, 0) (renormalized), not from p_i: "
                        "drawing from p_i counts the tokens the drafter already offered twice, and the output is biased.")
            return "the replacement token: sample_with_uniform(residual_distribution(p[i], q[i]), sample_uniform)."
        if len(got) > len(expected) and got[:rejected] == expected[:rejected]:
            return (f"stop at the first rejection: draft {rejected} is rejected (accept_uniforms[{rejected}] = {u:.4f} is "
                    f"not below {probability:.4f}), so the round emits {rejected} kept drafts and one drawn token.")
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    if first < num_kept:  # a draft that should have been kept was not emitted there
        return (f"draft {first} (token {drafts[first]}) must be kept: accept_uniforms[{first}] = "
                f"{float(accept[first]):.4f} is below its acceptance probability {float(keep[first]):.4f}.")
    return hint


def _compare_round(student_fn: Callable, drafts, q, p, accept, sample_uniform, where: str) -> None:
    call = f"verify_draft({drafts}, q, p, accept_uniforms={[round(float(u), 4) for u in accept]}, {sample_uniform:.4f}) ({where})"
    got = call_student(student_fn, call, list(drafts), q.clone(), p.clone(), accept.clone(), float(sample_uniform),
                       show_args=False)
    expected = reference(reference_module.verify_draft)(drafts, q, p, accept, float(sample_uniform))
    # Asked on every round, right or wrong, so the kit's recording holds what a diagnosis needs.
    keep = reference(reference_module.acceptance_probabilities)(drafts, q, p)
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        fail(f"{call} must return a list of ints", expected=expected, got=short_repr(got))
    got = list(got)
    if got == expected:
        return
    fail(f"{call} emitted different tokens", expected=expected, got=got,
         hint=_verify_hint(drafts, q, p, accept, float(sample_uniform), keep, expected, got))


@recorded_check
def check_verify(student_fn: Callable, vocab_size: int, num_drafts: int, num_trials: int = 20, *, seed: int = 0,
                 zero_fraction: float = 0.0) -> None:
    """``verify_draft(drafts, q, p, accept_uniforms, sample_uniform)`` emits the reference's tokens on the same inputs."""
    require_own_implementation(student_fn, "verify_draft")
    for drafts, q, p, accept, sample_uniform, where in _hand_made_cases(vocab_size, num_drafts, seed):
        _compare_round(student_fn, drafts, q, p, accept, sample_uniform, where)
    generator = torch.Generator().manual_seed(seed + 3000)
    for trial in range(num_trials):
        drafts, q, p = _draft_case(vocab_size, num_drafts, seed * 1000 + trial, zero_fraction)
        uniforms = torch.rand(num_drafts + 1, generator=generator, dtype=torch.float64)
        _compare_round(student_fn, drafts, q, p, uniforms[:num_drafts], float(uniforms[num_drafts]),
                       f"random trial {trial}")


@recorded_check
def check_verify_distribution(student_fn: Callable, vocab_size: int = 5, num_drafts: int = 3,
                              num_rounds: int = 1500, *, seed: int = 0) -> None:
    """Run the student's verifier as a sampler; a chi-square test on the first emitted token against p_0."""
    require_own_implementation(student_fn, "verify_draft")
    q = random_distributions(num_drafts, vocab_size, seed)
    p = random_distributions(num_drafts + 1, vocab_size, seed + 1)
    generator = torch.Generator().manual_seed(seed + 2)
    counts = [0] * vocab_size
    with one_thread():
        for _ in range(num_rounds):
            drafts = torch.multinomial(q, 1, generator=generator)[:, 0].tolist()
            uniforms = torch.rand(num_drafts + 1, generator=generator, dtype=torch.float64)
            emitted = call_student(student_fn, "verify_draft (as a sampler)", drafts, q, p, uniforms[:num_drafts],
                                   float(uniforms[num_drafts]), copy_args=False, show_args=False)
            if isinstance(emitted, torch.Tensor):
                emitted = emitted.tolist()
            if not emitted or not 0 <= int(emitted[0]) < vocab_size:
                fail("verify_draft returned no token or a token outside the vocabulary", show_values=False)
            counts[int(emitted[0])] += 1
    statistic = _chi_square(counts, p[0])
    p_value = reference_module.chi_square_p_value(statistic, vocab_size - 1)
    if p_value < 1e-4:
        fail(f"over {num_rounds} rounds the first emitted token does not follow the target's distribution p_0 "
             f"(chi-square {statistic:.1f}, p-value {p_value:.2g})",
             expected=[round(num_rounds * float(x), 1) for x in p[0]], got=counts,
             hint="speculative sampling must leave the output distribution unchanged: keep with min(1, p/q) and "
                  "replace a rejected draft from the residual max(p - q, 0), renormalized.")


def _chi_square(counts: Sequence[int], probs: torch.Tensor) -> float:
    total = sum(counts)
    return float(sum((c - total * float(x)) ** 2 / (total * float(x)) for c, x in zip(counts, probs) if float(x) > 0))


# ---------------------------------------------------------------------------------------------
# Chapter 3 (d): the chi-square statistic
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_chi_square(student_fn: Callable, observed_counts: Sequence[int], expected_probs: Sequence[float]) -> None:
    """``chi_square_statistic(observed_counts, expected_probs)`` against the reference (inf for an impossible category)."""
    require_own_implementation(student_fn, "chi_square_statistic")
    observed, probs = list(observed_counts), list(expected_probs)
    call = f"chi_square_statistic({short_repr(observed)}, {short_repr(probs)})"
    got = call_student(student_fn, call, observed, probs, show_args=False)
    expected = reference(reference_module.chi_square_statistic)(observed, probs)
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        got = float(got)
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        fail(f"{call} must return a number", expected=expected, got=short_repr(got))
    if math.isinf(expected) and math.isinf(got) and got > 0:
        return
    if math.isclose(float(got), expected, rel_tol=1e-9, abs_tol=1e-9):
        return
    total = sum(observed)
    hint = "sum over categories of (observed - n * p)^2 / (n * p), with n the number of draws."
    if math.isinf(expected):
        hint = "a category with p = 0 that was observed at all makes the fit impossible: return math.inf."
    elif math.isclose(float(got), sum((o - total * p) ** 2 for o, p in zip(observed, probs)), rel_tol=1e-9):
        hint = "divide each squared difference by its expected count n * p."
    elif math.isclose(float(got), sum((o - p) ** 2 / p for o, p in zip(observed, probs) if p > 0), rel_tol=1e-9):
        hint = "compare counts with expected *counts*: n * p, not p."
    fail(f"{call} gave the wrong statistic", expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# Chapter 4: drafts and their payoff
# ---------------------------------------------------------------------------------------------


def _ngram_hint(token_ids: list[int], num_draft_tokens: int, max_ngram: int, min_ngram: int, got: list[int],
                expected: list[int]) -> str:
    """What an n-gram drafter that proposed ``got`` most likely did wrong (computed here, no reference).

    It returns only the hint: the lookups it makes for the common mistakes stay inside it.
    """
    if len(got) > num_draft_tokens:
        return f"return at most num_draft_tokens = {num_draft_tokens} tokens."

    def starts_of(n: int, *, overlap: bool = True) -> list[int]:
        """Earlier starts of the n-token ending, latest first (overlap=False: a common misreading of the rule)."""
        last = len(token_ids) - (n + 1 if overlap else 2 * n)
        return [s for s in range(last, -1, -1) if token_ids[s : s + n] == token_ids[-n:]]

    def follows(start: int, n: int) -> list[int]:
        return token_ids[start + n : start + n + num_draft_tokens]

    lengths = list(range(min(max_ngram, len(token_ids) - 1), min_ngram - 1, -1))
    recurring = [n for n in lengths if starts_of(n)]
    if len(recurring) > 1 and got == follows(starts_of(recurring[-1])[0], recurring[-1]):
        n = recurring[0]
        return (f"that continues the shortest ending that recurs; try the longest first, n = max_ngram down to "
                f"min_ngram: here the {n}-token ending {token_ids[-n:]} recurs, and a longer match is better evidence "
                f"of what comes next than a shorter one.")
    without_overlap = next((follows(starts_of(n, overlap=False)[0], n) for n in lengths
                            if starts_of(n, overlap=False)), [])
    if recurring and got == without_overlap:
        n = recurring[0]
        start = starts_of(n)[0]
        return (f"the most recent earlier occurrence of the ending {token_ids[-n:]} starts at position {start}, where it "
                f"overlaps the ending itself (which starts at {len(token_ids) - n}); an overlapping occurrence counts: "
                f"only the ending's own position does not. Search every start s with s + n <= len(token_ids) - 1.")
    if not got and expected:
        return ("an earlier occurrence exists; search every start position s with s + n <= len(token_ids) - 1 "
                "(the ending itself, s = len - n, does not count, but overlapping occurrences do).")
    if recurring:
        n = recurring[0]
        first = follows(starts_of(n)[-1], n)
        if got == first and first != expected:
            return ("that continues the FIRST occurrence; use the most recent one (the text nearest the end is the "
                    "most likely to be copied next).")
    return ("for n from max_ngram down to min_ngram: find the LAST earlier place where the text's final n tokens occur "
            "with at least one token after them, and return up to num_draft_tokens of the tokens that follow.")


@recorded_check
def check_ngram_draft(student_fn: Callable, token_ids: Sequence[int], num_draft_tokens: int, max_ngram: int = 3,
                      min_ngram: int = 1) -> None:
    """``ngram_draft(token_ids, num_draft_tokens, max_ngram, min_ngram)`` proposes the reference's drafts."""
    require_own_implementation(student_fn, "ngram_draft")
    token_ids = [int(t) for t in token_ids]
    call = f"ngram_draft({short_repr(token_ids)}, {num_draft_tokens}, max_ngram={max_ngram}, min_ngram={min_ngram})"
    got = call_student(student_fn, call, token_ids, num_draft_tokens, max_ngram, min_ngram, show_args=False)
    expected = reference(reference_module.ngram_draft)(token_ids, num_draft_tokens, max_ngram, min_ngram)
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        fail(f"{call} must return a list of ints", expected=expected, got=short_repr(got))
    got = list(got)
    if got == expected:
        return
    fail(f"{call} proposed different drafts", expected=expected, got=got,
         hint=_ngram_hint(token_ids, num_draft_tokens, max_ngram, min_ngram, got, expected))


@recorded_check
def check_expected_tokens(student_expected: Callable, student_speedup: Callable, acceptance_rate: float,
                          num_draft_tokens: int, draft_cost: float, verify_cost: float = 1.0) -> None:
    """``expected_tokens_per_step(alpha, k)`` and ``speculative_speedup(alpha, k, draft_cost, verify_cost)``."""
    require_own_implementation(student_expected, "expected_tokens_per_step")
    require_own_implementation(student_speedup, "speculative_speedup")
    alpha, k = acceptance_rate, num_draft_tokens
    call = f"expected_tokens_per_step({alpha}, {k})"
    got = call_student(student_expected, call, alpha, k, show_args=False, hints={
        ZeroDivisionError: "with alpha = 1 every draft is kept: return k + 1 (1 - alpha is 0, do not divide by it)."})
    expected = reference(reference_module.expected_tokens_per_step)(alpha, k)
    try:
        ok = math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        hint = "1 + alpha + alpha^2 + ... + alpha^k = (1 - alpha^(k + 1)) / (1 - alpha); k + 1 when alpha = 1."
        try:
            value = float(got)
            if alpha < 1 and math.isclose(value, (1 - alpha**k) / (1 - alpha), rel_tol=1e-9):
                hint = ("one token short: besides the kept drafts, every round emits one more token (the correction "
                        "or the bonus), so the sum runs to alpha^k: (1 - alpha^(k + 1)) / (1 - alpha).")
            elif math.isclose(value, alpha * k + 1, rel_tol=1e-9):
                hint = "draft i is only reached if all drafts before it were kept: it counts with alpha^i, not alpha."
        except (TypeError, ValueError):
            pass
        if alpha == 1 and not ok:
            hint = "with alpha = 1 every draft is kept: k + 1 tokens (do not divide by 1 - alpha = 0)."
        fail(f"{call} is wrong", expected=expected, got=got, hint=hint)
    call = f"speculative_speedup({alpha}, {k}, draft_cost={draft_cost}, verify_cost={verify_cost})"
    got = call_student(student_speedup, call, alpha, k, draft_cost, verify_cost, show_args=False)
    expected = reference(reference_module.speculative_speedup)(alpha, k, draft_cost, verify_cost)
    try:
        ok = math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        fail(f"{call} is wrong", expected=expected, got=got,
             hint="tokens per round / cost of a round, the round costing k * draft_cost + verify_cost target steps.")


# ---------------------------------------------------------------------------------------------
# Chapter 5: speculation in the engine
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_commit_verified(student_fn: Callable, num_computed_tokens: int, draft_token_ids: Sequence[int],
                          num_accepted: int, next_token_id: int) -> None:
    """``commit_verified(P, drafts, num_accepted, next_token) -> (new_token_ids, num_computed_after, num_slots_to_free)``."""
    require_own_implementation(student_fn, "commit_verified")
    drafts = [int(t) for t in draft_token_ids]
    call = f"commit_verified({num_computed_tokens}, {drafts}, {num_accepted}, {next_token_id})"
    got = call_student(student_fn, call, num_computed_tokens, drafts, num_accepted, next_token_id, show_args=False)
    expected = reference(reference_module.commit_verified)(num_computed_tokens, drafts, num_accepted, next_token_id)
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        fail(f"{call} must return (new_token_ids, num_computed_tokens, num_slots_to_free)", expected=expected,
             got=short_repr(got))
    tokens, computed, to_free = got
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.tolist()
    tokens = list(tokens) if isinstance(tokens, (list, tuple)) else tokens
    if tokens != expected[0]:
        hint = "the kept drafts, draft_token_ids[:num_accepted], followed by next_token_id."
        if tokens == expected[0][:-1]:
            hint = "next_token_id is missing: every round emits one token more than it keeps (the correction or bonus)."
        fail(f"{call}: wrong new tokens", expected=expected[0], got=tokens, hint=hint)
    if computed != expected[1]:
        hint = (f"the last token (position {num_computed_tokens}) and the {num_accepted} kept drafts now have their KV: "
                f"{num_computed_tokens} + 1 + {num_accepted}.")
        if computed == expected[1] + 1:
            hint = ("next_token_id has not run through the model yet (it was only sampled): it is not computed; it "
                    "runs in the next step.")
        elif computed == expected[1] - 1:
            hint = f"the last token itself ran in this step (at position {num_computed_tokens}): count it too."
        fail(f"{call}: wrong number of computed tokens", expected=expected[1], got=computed, hint=hint)
    if to_free != expected[2]:
        slots = f"{expected[2]} slot" + ("" if expected[2] == 1 else "s")
        hint = ("the rejected drafts' slots hold keys and values of tokens that are not in the sequence: give back "
                f"len(draft_token_ids) - num_accepted = {slots}.")
        fail(f"{call}: wrong number of slots to free", expected=expected[2], got=to_free, hint=hint)


def _tiny_target(seed: int):
    from course_lib.model import LlamaModel, ModelConfig, random_weights

    config = ModelConfig(num_layers=2, hidden_size=32, num_q_heads=4, num_kv_heads=2, head_dim=8, vocab_size=24,
                         intermediate_size=64, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5)
    weights = {name: tensor.double() for name, tensor in random_weights(config, seed=seed).items()}
    return LlamaModel(config, weights).eval()


class _ByteTokenizer:
    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode_token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id % 256])


@recorded_check
def check_commit_in_engine(student_fn: Callable, model_name: str = "tiny", num_requests: int = 6,
                           num_draft_tokens: int = 3, *, seed: int = 0, num_blocks: int | None = None) -> None:
    """The course's engine with the student's ``commit_verified``: plain greedy outputs, and after every step
    each running request holds exactly one slot per computed token (the rejected drafts' slots were given back)."""
    require_own_implementation(student_fn, "commit_verified")
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams
    from course_lib.speculative import SpeculativeConfig

    rng = random.Random(seed)
    if model_name == "tiny":
        model, tokenizer = _tiny_target(seed), _ByteTokenizer()
        prompts = [[rng.randrange(6) for _ in range(rng.randrange(2, 40))] for _ in range(num_requests)]
        options = {"block_size": 4, "num_blocks": num_blocks or 128, "max_num_batched_tokens": 64}
        max_tokens = 20
    elif model_name == "smollm2":
        model, tokenizer = smollm2()
        texts = ["Repeat after me: one two three four five, one two three four five.",
                 "List the days of the week: Monday, Tuesday, Wednesday,"]
        prompts = [tokenizer.encode(texts[i % len(texts)]) for i in range(num_requests)]
        options = {"num_blocks": num_blocks or 64}
        max_tokens = 12
    else:
        raise ValueError(f"model_name must be 'tiny' or 'smollm2', got {model_name!r}")
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    with one_thread():
        plain = LLMEngine(model, tokenizer, **options).generate(prompts, params)
        def commit(*args):
            return call_student(student_fn, "commit_verified (called by the engine)", *args)

        config = SpeculativeConfig(method="ngram", num_draft_tokens=num_draft_tokens, commit_fn=commit,
                                   draft_fn=reference(reference_module.ngram_draft))
        try:
            engine = LLMEngine(model, tokenizer, speculative=config, **options)
            for prompt in prompts:
                engine.add_request(prompt, params)
            outputs: dict = {}
            while engine.has_unfinished():
                for output in engine.step():
                    outputs.setdefault(output.request_id, []).extend(output.new_token_ids)
                for request in engine.scheduler.running:
                    if request.num_computed_tokens < request.num_tokens - 1:
                        continue  # a prompt still in chunked prefill holds slots for all its tokens
                    held = engine.allocator.num_slots(request.request_id)
                    if held != request.num_tokens - 1:
                        fail(f"after a speculative step request {request.request_id!r} holds {held} KV slots for "
                             f"{request.num_tokens} tokens", expected=request.num_tokens - 1, got=held,
                             hint="every token but the newest has its slot, and nothing more: the slots of rejected "
                                  "drafts must be given back (num_slots_to_free = drafts - kept).")
        except ValueError as error:  # the engine refused a result it cannot apply
            fail(f"the engine could not apply your commit_verified: {error}", show_values=False,
                 hint="check_commit_verified's hand-made rounds above show what each number must be.")
    got = [outputs.get(str(i), []) for i in range(len(prompts))]
    expected = [o.token_ids for o in plain]
    for index, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            fail(f"request {index}: speculative decoding with your commit_verified changed the greedy output",
                 expected=b, got=a,
                 hint="the new tokens are the kept drafts and next_token_id; only the tokens whose KV ran are "
                      "computed (the newest one has not run yet).")
    if engine.stats.num_accepted_tokens == 0:
        fail("no draft was ever accepted in this workload; the check cannot see your function at work",
             show_values=False, hint="this is a problem with the check's workload, not your code: tell your instructor.")


@recorded_check
def check_crossover_batch_size(student_fn: Callable, batch_sizes: Sequence[int], plain_tokens_per_s: Sequence[float],
                               speculative_tokens_per_s: Sequence[float]) -> None:
    """``crossover_batch_size(batch_sizes, plain, speculative)``: where speculation stops paying (interpolated)."""
    require_own_implementation(student_fn, "crossover_batch_size")
    args = (list(batch_sizes), list(plain_tokens_per_s), list(speculative_tokens_per_s))
    call = f"crossover_batch_size({args[0]}, {args[1]}, {args[2]})"
    got = call_student(student_fn, call, *args, show_args=False)
    expected = reference(reference_module.crossover_batch_size)(*args)
    if expected is None:
        if got is None:
            return
        fail(f"{call}: the speculative line never crosses below the plain one here", expected=None, got=got,
             hint="return None when speculation is faster at every batch size (or slower at every one).")
    try:
        ok = got is not None and math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        fail(f"{call}: wrong crossing point", expected=expected, got=got,
             hint="find the first pair of neighbouring batch sizes where speedup = speculative / plain goes from "
                  "> 1 to <= 1, and interpolate linearly in batch size where the speedup equals 1.")
