"""Speculative decoding: draft k tokens cheaply, check them with one pass of the target model.

One round for a sequence whose last token sits at position P:

1. a **drafter** proposes tokens d_1..d_k (from a cheap model with distributions q_1..q_k, or by
   looking the recent tokens up in the text so far: ``ngram_draft``);
2. the **target** runs once over [last token, d_1, ..., d_k] at positions P..P+k and gives its
   next-token distributions p_0..p_k (row i scores the token after position P + i);
3. **verification** (``verify_draft``) walks the drafts left to right: d_i is kept with probability
   min(1, p_{i-1}(d_i) / q_i(d_i)); at the first rejection one token is drawn from the residual
   norm(max(p_{i-1} - q_i, 0)) and the round ends; if all k are kept, a bonus token comes from p_k.

Every token that comes out is distributed exactly as if the target had sampled it alone, so a bad
drafter makes decoding slower, never different. With temperature 0 (greedy) the rule becomes
"keep drafts while they equal the target's argmax, then add the target's argmax" (``greedy_verify``),
and the output equals plain greedy decoding token for token.

The uniform random numbers are *arguments* of ``verify_draft``: the rule is then a deterministic
function that tests can replay, and an engine draws the numbers from each request's own generator.

Where this module is used:

- ``speculative_generate``: a batch-1 greedy loop over a contiguous ``KVCache`` (chapter 4), with an
  n-gram drafter or a draft model (``ModelDrafter``) that shares the target's cache;
- ``SpeculativeConfig`` / ``Speculator``: speculation inside ``LLMEngine`` (chapter 5). The scheduler
  reserves ``num_draft_tokens`` lookahead slots per decode; the speculator fills them with drafts
  (running the draft model over the paged cache for ``method="self"``), the runner verifies every
  request's drafts in one forward (each drafted position is one more decode row), and
  ``commit_verified`` turns a request's accepted count into appended tokens and slots to give back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from course_lib.exercises import exercise, is_locked, stub_message

__all__ = [
    "METHODS",
    "ModelDrafter",
    "SpeculationStats",
    "SpeculativeConfig",
    "Speculator",
    "acceptance_probabilities",
    "chi_square_p_value",
    "chi_square_statistic",
    "commit_verified",
    "crossover_batch_size",
    "expected_tokens_per_step",
    "greedy_verify",
    "ngram_draft",
    "residual_distribution",
    "sample_with_uniform",
    "speculative_generate",
    "speculative_speedup",
    "verify_draft",
]

LAB = "lab04-faster-decoding"
SAMPLING_CHAPTER = "03_speculative_sampling"
DRAFTS_CHAPTER = "04_drafts"
ENGINE_CHAPTER = "05_speculative_engine"

METHODS = ("ngram", "self")
"""Drafters the engine knows: prompt lookup (``ngram_draft``) and the target with int4 weights."""


# --------------------------------------------------------------------------------------------
# Chapter 3: the speculative sampling rule
# --------------------------------------------------------------------------------------------


def _check_distributions(draft_token_ids: Sequence[int], draft_probs: Tensor, target_probs: Tensor) -> int:
    """Validate the verifier's inputs; returns k, the number of drafts."""
    num_drafts = len(draft_token_ids)
    for name, probs, rows in (("draft_probs", draft_probs, num_drafts), ("target_probs", target_probs, num_drafts + 1)):
        if not isinstance(probs, Tensor) or probs.dim() != 2 or not probs.dtype.is_floating_point:
            raise ValueError(f"{name} must be a 2-D float tensor [rows, vocab]")
        if probs.shape[0] < rows:
            raise ValueError(f"{name} needs at least {rows} rows for {num_drafts} drafts, got {probs.shape[0]}")
    if draft_probs.shape[1] != target_probs.shape[1]:
        raise ValueError(f"draft_probs and target_probs must share the vocabulary size, got "
                         f"{draft_probs.shape[1]} and {target_probs.shape[1]}")
    vocab_size = target_probs.shape[1]
    if any(not 0 <= int(token) < vocab_size for token in draft_token_ids):
        raise ValueError(f"draft_token_ids must lie in [0, {vocab_size})")
    return num_drafts


@exercise(LAB, SAMPLING_CHAPTER, "acceptance_probabilities")
def acceptance_probabilities(draft_token_ids: Sequence[int], draft_probs: Tensor, target_probs: Tensor) -> Tensor:
    """The chance each draft is kept: ``min(1, p_i(d_i) / q_i(d_i))``.

    draft_token_ids: [k] ints d_1..d_k; draft_probs: [k, vocab], row i is the distribution d_{i+1}
    was drawn from; target_probs: [k + 1, vocab] (or more rows), row i the target's distribution
    for the same position. Returns fp32 [k]. A draft the drafter could not have drawn (q = 0) is
    kept if the target gives it any probability.
    """
    num_drafts = _check_distributions(draft_token_ids, draft_probs, target_probs)
    rows = torch.arange(num_drafts)
    tokens = torch.tensor([int(t) for t in draft_token_ids], dtype=torch.long)
    p = target_probs[rows, tokens].float()
    q = draft_probs[rows, tokens].float()
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    return torch.where(q > 0, (p / safe_q).clamp(max=1.0), (p > 0).float())


@exercise(LAB, SAMPLING_CHAPTER, "residual_distribution")
def residual_distribution(target_row: Tensor, draft_row: Tensor) -> Tensor:
    """The distribution a rejected draft is replaced from: ``max(p - q, 0)``, renormalized.

    target_row p, draft_row q: [vocab] probabilities -> fp32 [vocab] summing to 1. It puts mass only
    where the target wants more than the drafter offered. If p == q everywhere the residual is all
    zeros (a rejection then has probability 0); p itself is returned in that case.
    """
    if not isinstance(target_row, Tensor) or not isinstance(draft_row, Tensor) or target_row.shape != draft_row.shape \
            or target_row.dim() != 1:
        raise ValueError("target_row and draft_row must be 1-D tensors of the same length [vocab]")
    residual = (target_row.float() - draft_row.float()).clamp(min=0)
    total = residual.sum()
    if float(total) <= 0:
        return target_row.float() / target_row.float().sum()
    return residual / total


def sample_with_uniform(probs: Tensor, uniform: float) -> int:
    """Draw a token from ``probs [vocab]`` with one uniform number in [0, 1) (inverse CDF).

    Returns the first token whose cumulative probability exceeds ``uniform * sum(probs)``; a token
    of probability 0 is never returned. The same (probs, uniform) always gives the same token.
    """
    if not isinstance(probs, Tensor) or probs.dim() != 1 or not probs.numel():
        raise ValueError("probs must be a non-empty 1-D tensor [vocab]")
    if not 0.0 <= float(uniform) < 1.0:
        raise ValueError(f"uniform must lie in [0, 1), got {uniform!r}")
    probs = probs.double()
    cdf = torch.cumsum(probs, dim=0)
    if not float(cdf[-1]) > 0:
        raise ValueError("probs must have a positive sum")
    index = int(torch.searchsorted(cdf, torch.tensor([float(uniform) * float(cdf[-1])], dtype=torch.float64),
                                   right=True))
    # Rounding can push the threshold to the very end: take the last token that has probability.
    last_possible = int(torch.nonzero(probs > 0)[-1])
    return min(index, last_possible)


@exercise(LAB, SAMPLING_CHAPTER, "verify")
def verify_draft(draft_token_ids: Sequence[int], draft_probs: Tensor, target_probs: Tensor,
                 accept_uniforms: Tensor, sample_uniform: float) -> list[int]:
    """Speculative sampling: the tokens one round emits (1 to k + 1 of them).

    draft_token_ids [k], draft_probs [k, vocab], target_probs [k + 1, vocab]: as in
    ``acceptance_probabilities``. accept_uniforms [k]: uniform numbers in [0, 1); draft i is kept iff
    ``accept_uniforms[i] < min(1, p_i(d_i) / q_i(d_i))``. sample_uniform: one more uniform number, for
    the token drawn with ``sample_with_uniform``: at the first rejection (draft i) from
    ``residual_distribution(p_i, q_i)``, or, when all k drafts are kept, the bonus token from p_k.
    Returns the kept drafts followed by that one drawn token.
    """
    num_drafts = _check_distributions(draft_token_ids, draft_probs, target_probs)
    if not isinstance(accept_uniforms, Tensor) or accept_uniforms.numel() < num_drafts:
        raise ValueError(f"accept_uniforms must be a tensor of at least {num_drafts} uniform numbers")
    keep = acceptance_probabilities(draft_token_ids, draft_probs, target_probs)
    emitted: list[int] = []
    for i in range(num_drafts):
        if float(accept_uniforms[i]) < float(keep[i]):
            emitted.append(int(draft_token_ids[i]))
            continue
        emitted.append(sample_with_uniform(residual_distribution(target_probs[i], draft_probs[i]), sample_uniform))
        return emitted
    emitted.append(sample_with_uniform(target_probs[num_drafts], sample_uniform))  # all kept: the bonus token
    return emitted


def greedy_verify(draft_token_ids: Sequence[int], target_logits: Tensor) -> list[int]:
    """Temperature 0: keep drafts while each equals the target's argmax, then add the target's argmax.

    draft_token_ids [k]; target_logits [k + 1, vocab] (row i is the target's prediction after the
    last token plus the first i drafts). Returns 1..k+1 tokens, exactly what greedy decoding of
    the target alone produces. (This is ``verify_draft`` with p and q one-hot.)
    """
    num_drafts = len(draft_token_ids)
    if not isinstance(target_logits, Tensor) or target_logits.dim() != 2 or target_logits.shape[0] < num_drafts + 1:
        raise ValueError(f"target_logits must be a 2-D tensor with at least {num_drafts + 1} rows")
    best = target_logits[: num_drafts + 1].argmax(dim=-1).tolist()
    emitted: list[int] = []
    for i, token in enumerate(draft_token_ids):
        if int(token) != best[i]:
            break
        emitted.append(int(token))
    emitted.append(best[len(emitted)])
    return emitted


@exercise(LAB, SAMPLING_CHAPTER, "chi_square")
def chi_square_statistic(observed_counts: Sequence[int] | Tensor, expected_probs: Sequence[float] | Tensor) -> float:
    """Pearson's chi-square statistic of observed counts against a distribution.

    observed_counts [categories] (how often each token came out, n draws in all); expected_probs
    [categories] (summing to 1). Returns ``sum_c (observed_c - n p_c)^2 / (n p_c)`` over the categories
    with p_c > 0; infinity if a category with p_c = 0 was observed.
    """
    observed = torch.as_tensor(observed_counts, dtype=torch.float64).flatten()
    expected_p = torch.as_tensor(expected_probs, dtype=torch.float64).flatten()
    if observed.shape != expected_p.shape or not observed.numel():
        raise ValueError("observed_counts and expected_probs must be non-empty and the same length")
    if bool((observed < 0).any()) or bool((expected_p < 0).any()):
        raise ValueError("counts and probabilities must be >= 0")
    total = float(observed.sum())
    if total <= 0:
        raise ValueError("observed_counts must hold at least one draw")
    possible = expected_p > 0
    if bool((observed[~possible] > 0).any()):
        return math.inf
    expected = total * expected_p[possible]
    return float(((observed[possible] - expected) ** 2 / expected).sum())


def chi_square_p_value(statistic: float, degrees_of_freedom: int) -> float:
    """P(chi-square with ``degrees_of_freedom`` >= statistic): small means "these counts do not fit".

    For counts over c categories tested against a fixed distribution, degrees_of_freedom = c - 1.
    (The regularized upper incomplete gamma function Q(dof / 2, statistic / 2).)
    """
    if not isinstance(degrees_of_freedom, int) or degrees_of_freedom < 1:
        raise ValueError(f"degrees_of_freedom must be an integer >= 1, got {degrees_of_freedom!r}")
    if math.isinf(statistic):
        return 0.0
    return float(torch.special.gammaincc(torch.tensor(degrees_of_freedom / 2, dtype=torch.float64),
                                         torch.tensor(max(float(statistic), 0.0) / 2, dtype=torch.float64)))


# --------------------------------------------------------------------------------------------
# Chapter 4: drafts and their payoff
# --------------------------------------------------------------------------------------------


@exercise(LAB, DRAFTS_CHAPTER, "ngram_draft")
def ngram_draft(token_ids: Sequence[int], num_draft_tokens: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Prompt lookup: propose the tokens that followed the last time the text's ending appeared.

    For n = max_ngram down to min_ngram: take the last n tokens; find their most recent earlier
    occurrence that has at least one token after it (the ending itself does not count); if there is
    one, return the (up to) ``num_draft_tokens`` tokens that follow it. Returns [] when no n-gram
    recurs. Longer n-grams are tried first: a longer match is more likely to continue the same way.
    """
    for name, value, low in (("num_draft_tokens", num_draft_tokens, 0), ("max_ngram", max_ngram, 1),
                             ("min_ngram", min_ngram, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if min_ngram > max_ngram:
        raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")
    tokens = [int(token) for token in token_ids]
    if num_draft_tokens == 0:
        return []
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        suffix = tokens[-n:]
        # Latest start first; start + n <= len - 1 keeps at least one token after the match.
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + num_draft_tokens]
    return []


def _check_rate_and_k(acceptance_rate: float, num_draft_tokens: int) -> None:
    if not isinstance(acceptance_rate, (int, float)) or isinstance(acceptance_rate, bool) or not 0 <= acceptance_rate <= 1:
        raise ValueError(f"acceptance_rate must be a number in [0, 1], got {acceptance_rate!r}")
    if not isinstance(num_draft_tokens, int) or isinstance(num_draft_tokens, bool) or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens must be an integer >= 0, got {num_draft_tokens!r}")


@exercise(LAB, DRAFTS_CHAPTER, "expected_tokens")
def expected_tokens_per_step(acceptance_rate: float, num_draft_tokens: int) -> float:
    """Tokens one round emits on average when each draft is kept with probability alpha, independently.

    Draft i is reached and kept with probability alpha^i, and one more token (correction or bonus)
    always comes: 1 + alpha + ... + alpha^k = (1 - alpha^(k + 1)) / (1 - alpha), and k + 1 when alpha = 1.
    """
    _check_rate_and_k(acceptance_rate, num_draft_tokens)
    if acceptance_rate == 1:
        return float(num_draft_tokens + 1)
    return (1 - acceptance_rate ** (num_draft_tokens + 1)) / (1 - acceptance_rate)


@exercise(LAB, DRAFTS_CHAPTER, "expected_tokens")
def speculative_speedup(acceptance_rate: float, num_draft_tokens: int, draft_cost: float,
                        verify_cost: float = 1.0) -> float:
    """Tokens per unit of time with speculation, relative to plain decoding (one token per target step).

    A round costs k draft steps of ``draft_cost`` each (in target decode steps) plus one verification
    pass of ``verify_cost`` (about 1 at small batch: reading the weights dominates) and emits
    ``expected_tokens_per_step`` tokens: speedup = tokens / (k * draft_cost + verify_cost).
    """
    _check_rate_and_k(acceptance_rate, num_draft_tokens)
    for name, value in (("draft_cost", draft_cost), ("verify_cost", verify_cost)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    round_cost = num_draft_tokens * draft_cost + verify_cost
    if round_cost <= 0:
        raise ValueError("a round must cost something: draft_cost * num_draft_tokens + verify_cost > 0")
    return expected_tokens_per_step(acceptance_rate, num_draft_tokens) / round_cost


@dataclass
class SpeculationStats:
    """Counters of speculative rounds: target passes, drafted tokens, and drafts kept."""

    num_steps: int = 0
    num_drafted_tokens: int = 0
    num_accepted_tokens: int = 0
    num_emitted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """Kept drafts / drafted tokens (None before any draft)."""
        return self.num_accepted_tokens / self.num_drafted_tokens if self.num_drafted_tokens else None

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens emitted per target pass (None before any pass)."""
        return self.num_emitted_tokens / self.num_steps if self.num_steps else None


class ModelDrafter:
    """Drafts greedily with a draft model that shares the target's KV cache (batch 1, ``speculative_generate``).

    The draft model (say the target with int4 weights, ``quantize_model(model, "int4")``) has the
    target's shapes, so it can read the target's keys and values for the text so far and write its
    own for the tokens it drafts; the target's verification pass then overwrites those positions.
    No second cache, and the draft never sees stale text.
    """

    def __init__(self, draft_model) -> None:
        self.draft_model = draft_model

    def propose(self, cache, last_token: int, num_draft_tokens: int) -> list[int]:
        """Run ``num_draft_tokens`` greedy steps from ``last_token`` (at position cache.seq_len) and roll back."""
        start = cache.seq_len
        drafts: list[int] = []
        token = last_token
        for _ in range(num_draft_tokens):
            logits = self.draft_model(torch.tensor([token], device=self.draft_model.device),
                                      cache.next_positions(1), cache)
            token = int(logits[-1].argmax())
            drafts.append(token)
        cache.truncate(start)
        return drafts


def speculative_generate(model, prompt_ids: Sequence[int], max_new_tokens: int, *,
                         drafter: Callable[[list[int], int], list[int]] | ModelDrafter,
                         num_draft_tokens: int = 4, stats: SpeculationStats | None = None) -> list[int]:
    """Greedy decoding of one prompt with speculation: the same tokens as ``greedy_generate``, fewer target passes.

    drafter: ``f(token_ids, k) -> up to k drafts`` (for example ``lambda ids, k: ngram_draft(ids, k)``)
    or a ``ModelDrafter``. Each round runs the target once over [last token] + drafts through a
    ``KVCache``, keeps what ``greedy_verify`` keeps, and truncates the cache to the tokens kept
    (the rejected drafts' keys and values are dropped). ``stats`` (optional) is filled in.
    Returns the generated ids (the eos token included if it came).
    """
    from course_lib.kv_cache import KVCache

    prompt_ids = [int(token) for token in prompt_ids]
    if not prompt_ids:
        raise ValueError("prompt_ids is empty; pass at least one token")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if not isinstance(num_draft_tokens, int) or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens must be an int >= 0, got {num_draft_tokens!r}")
    config = model.config
    longest = len(prompt_ids) + max_new_tokens + num_draft_tokens
    if longest > config.max_position_embeddings:
        raise ValueError(f"prompt + max_new_tokens + num_draft_tokens ({longest}) exceeds max_position_embeddings "
                         f"({config.max_position_embeddings})")
    stats = stats if stats is not None else SpeculationStats()
    device = model.device
    cache = KVCache(config, max_seq_len=longest, dtype=model.dtype, device=device)
    eos = config.eos_token_id
    with torch.inference_mode():
        logits = model(torch.tensor(prompt_ids, device=device), cache.next_positions(len(prompt_ids)), cache,
                       logits_indices=torch.tensor([-1], device=device))
        generated = [int(logits[0].argmax())]
        while generated[-1] != eos and len(generated) < max_new_tokens:
            # Never draft past max_new_tokens: a round emits at most k + 1 tokens.
            budget = min(num_draft_tokens, max_new_tokens - len(generated) - 1)
            if isinstance(drafter, ModelDrafter):
                drafts = drafter.propose(cache, generated[-1], budget)
            else:
                drafts = [int(token) for token in drafter(prompt_ids + generated, budget)][:budget]
            start = cache.seq_len
            run = torch.tensor([generated[-1], *drafts], device=device)
            logits = model(run, cache.next_positions(len(run)), cache)  # [1 + len(drafts), vocab]
            emitted = greedy_verify(drafts, logits)
            cache.truncate(start + len(emitted))  # the last token and the kept drafts have their KV now
            stats.num_steps += 1
            stats.num_drafted_tokens += len(drafts)
            stats.num_accepted_tokens += len(emitted) - 1
            for token in emitted:
                generated.append(token)
                stats.num_emitted_tokens += 1
                if token == eos or len(generated) == max_new_tokens:
                    break
    return generated


# --------------------------------------------------------------------------------------------
# Chapter 5: speculation inside the engine
# --------------------------------------------------------------------------------------------


@exercise(LAB, ENGINE_CHAPTER, "commit_verified")
def commit_verified(num_computed_tokens: int, draft_token_ids: Sequence[int], num_accepted: int,
                    next_token_id: int) -> tuple[list[int], int, int]:
    """Turn one request's verification result into tokens to append and slots to give back.

    The request ran [last token, d_1..d_k] at positions P..P+k (P = num_computed_tokens, the
    position of its last token; k = len(draft_token_ids)), every position with a reserved KV slot.
    Verification kept the first ``num_accepted`` drafts and produced ``next_token_id`` (the
    correction, or the bonus token when all k were kept).

    Returns (new_token_ids, num_computed_tokens_after, num_slots_to_free):
    new_token_ids = the kept drafts followed by next_token_id; the KV of the last token and of the
    kept drafts is now in the cache, so P + 1 + num_accepted tokens are computed (next_token_id has
    not run yet); the k - num_accepted rejected drafts' slots hold keys and values of tokens that are
    not in the sequence, so they are given back.
    """
    num_drafts = len(draft_token_ids)
    if not isinstance(num_accepted, int) or not 0 <= num_accepted <= num_drafts:
        raise ValueError(f"num_accepted must be an integer in [0, {num_drafts}], got {num_accepted!r}")
    new_token_ids = [int(token) for token in draft_token_ids[:num_accepted]] + [int(next_token_id)]
    return new_token_ids, num_computed_tokens + 1 + num_accepted, num_drafts - num_accepted


@exercise(LAB, ENGINE_CHAPTER, "crossover_batch_size")
def crossover_batch_size(batch_sizes: Sequence[int], plain_tokens_per_s: Sequence[float],
                         speculative_tokens_per_s: Sequence[float]) -> float | None:
    """The batch size at which speculation stops paying, from measurements at increasing batch sizes.

    speedup_i = speculative_tokens_per_s[i] / plain_tokens_per_s[i]. Finds the first i with
    speedup_i > 1 and speedup_{i+1} <= 1 and returns the batch size where the straight line between
    (batch_sizes[i], speedup_i) and (batch_sizes[i+1], speedup_{i+1}) reaches 1. None if there is no
    such crossing (speculation pays at every batch size measured, or never pays at the first one).
    """
    sizes = [float(b) for b in batch_sizes]
    if not len(sizes) == len(plain_tokens_per_s) == len(speculative_tokens_per_s) or len(sizes) < 2:
        raise ValueError("batch_sizes, plain_tokens_per_s and speculative_tokens_per_s must have the same length >= 2")
    if any(b2 <= b1 for b1, b2 in zip(sizes, sizes[1:])):
        raise ValueError(f"batch_sizes must increase, got {list(batch_sizes)}")
    if any(float(t) <= 0 for t in plain_tokens_per_s):
        raise ValueError("plain_tokens_per_s must be > 0")
    speedups = [float(s) / float(p) for s, p in zip(speculative_tokens_per_s, plain_tokens_per_s)]
    for i in range(len(sizes) - 1):
        if speedups[i] > 1 >= speedups[i + 1]:
            fraction = (speedups[i] - 1) / (speedups[i] - speedups[i + 1])
            return sizes[i] + fraction * (sizes[i + 1] - sizes[i])
    return None


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding in ``LLMEngine(model, tokenizer, speculative=SpeculativeConfig(...))``.

    method: "ngram" (prompt lookup, ``ngram_draft``: free, good when the output copies the prompt) or
    "self" (the target with int4 weights drafts greedily, sharing the engine's paged KV cache).
    num_draft_tokens: k, drafts per request per step (the scheduler reserves k lookahead slots).
    max_ngram: the longest n-gram "ngram" looks up.
    draft_model: for "self", the draft model (default: ``quantize_model(model, "int4")``).
    draft_fn, verify_fn, commit_fn: replacements with the signatures of ``ngram_draft``,
    ``verify_draft`` and ``commit_verified`` (a student's own; required where the course's are locked).
    """

    method: str = "ngram"
    num_draft_tokens: int = 4
    max_ngram: int = 3
    draft_model: Any = field(default=None, compare=False, repr=False)
    draft_fn: Callable | None = field(default=None, compare=False, repr=False)
    verify_fn: Callable | None = field(default=None, compare=False, repr=False)
    commit_fn: Callable | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name, low in (("num_draft_tokens", 1), ("max_ngram", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.method == "ngram" and self.draft_model is not None:
            raise ValueError("draft_model is for method='self'; method='ngram' needs no model")


def _reference_or_locked(given: Callable | None, reference: Callable, argument: str) -> Callable:
    if given is not None:
        return given
    if is_locked(LAB):
        raise RuntimeError(f"speculative decoding needs {reference.__name__}: "
                           f"{stub_message(reference.__name__, reference.__course_exercise__)} "
                           f"Pass yours as SpeculativeConfig({argument}=...).")
    return reference


def _check_commit(request, chunk, result) -> tuple[list[int], int, int]:
    """Reject a commit result the engine cannot apply (the KV cache would be left inconsistent)."""
    try:
        new_token_ids, num_computed, num_to_free = result
        new_token_ids = [int(token) for token in new_token_ids]
        num_computed, num_to_free = int(num_computed), int(num_to_free)
    except (TypeError, ValueError) as error:
        raise ValueError(f"commit_fn must return (new_token_ids, num_computed_tokens, num_slots_to_free), "
                         f"got {result!r}") from error
    num_drafts = len(chunk.draft_token_ids)
    if not 1 <= len(new_token_ids) <= num_drafts + 1:
        raise ValueError(f"commit_fn returned {len(new_token_ids)} new tokens; a round with {num_drafts} drafts "
                         f"emits between 1 and {num_drafts + 1}")
    num_tokens_after = request.num_tokens + len(new_token_ids)
    if not chunk.start < num_computed < num_tokens_after:
        raise ValueError(f"commit_fn says {num_computed} tokens are computed; after this step the request has "
                         f"{num_tokens_after} tokens, its last token (position {chunk.start}) ran, and the newest "
                         f"token has not run yet: it must lie in [{chunk.start + 1}, {num_tokens_after - 1}]")
    reserved_end = chunk.start + chunk.num_tokens  # slots exist for positions start .. start + num_tokens - 1
    if not 0 <= num_to_free <= reserved_end - num_computed:
        raise ValueError(f"commit_fn frees {num_to_free} slots; positions {chunk.start}..{reserved_end - 1} hold "
                         f"slots and the first {num_computed} tokens must keep theirs, so at most "
                         f"{reserved_end - num_computed} can go")
    return new_token_ids, num_computed, num_to_free


class Speculator:
    """The engine's speculative part: drafts for the scheduled decodes, verification, commit.

    ``propose`` turns each decode chunk that got lookahead slots into a verify chunk
    [last token, drafts...] (giving back the slots no draft uses); ``sample`` replaces the engine's
    sampler for a step: plain rows are sampled as usual, verify rows are checked (greedy rows with
    ``greedy_verify``, sampled rows with ``verify_fn`` and one-hot draft distributions, since both
    drafters propose deterministically) and each request's result goes through ``commit_fn``.
    """

    def __init__(self, config: SpeculativeConfig, model, kv_cache, attention_backend: str = "torch") -> None:
        from course_lib.model_runner import ModelRunner

        self.config = config
        self.commit_fn = _reference_or_locked(config.commit_fn, commit_verified, "commit_fn")
        self.draft_fn = None
        self.draft_runner = None
        if config.method == "ngram":
            self.draft_fn = _reference_or_locked(config.draft_fn, ngram_draft, "draft_fn")
        else:
            draft_model = config.draft_model
            if draft_model is None:
                from course_lib.quantization import quantize_model

                draft_model = quantize_model(model, "int4")
            if draft_model.config != model.config:
                raise ValueError("the draft model must have the target's config (it shares the target's KV cache)")
            self.draft_runner = ModelRunner(draft_model, kv_cache, attention_backend)
        self.num_drafted_tokens = 0
        self.num_accepted_tokens = 0

    # ----- drafting --------------------------------------------------------------------------

    def propose(self, chunks: list, block_tables: list[list[int]], scheduler) -> list:
        """Chunks with drafts in the decodes that reserved lookahead slots; unused slots go back."""
        drafting = [i for i, chunk in enumerate(chunks) if chunk.num_lookahead_slots > 0]
        if not drafting:
            return chunks
        if self.draft_fn is not None:
            drafts = {i: self._ngram_drafts(chunks[i]) for i in drafting}
        else:
            drafts = self._model_drafts(chunks, block_tables, drafting)
        chunks = list(chunks)
        for i in drafting:
            chunk = chunks[i]
            unused = chunk.num_lookahead_slots - len(drafts[i])
            if unused:
                scheduler.release_slots(chunk.request, unused)
            chunks[i] = type(chunk)(chunk.request, chunk.start, 1 + len(drafts[i]), chunk.samples,
                                    draft_token_ids=tuple(drafts[i]))
        return chunks

    def _ngram_drafts(self, chunk) -> list[int]:
        proposed = self.draft_fn(list(chunk.request.token_ids), chunk.num_lookahead_slots, self.config.max_ngram)
        if not isinstance(proposed, (list, tuple)):
            raise ValueError(f"draft_fn must return a list of token ids, got {type(proposed).__name__}")
        return [int(token) for token in proposed][: chunk.num_lookahead_slots]

    def _model_drafts(self, chunks: list, block_tables: list[list[int]], drafting: list[int]) -> dict[int, list[int]]:
        """Greedy drafts from the draft model, one batched decode step per draft position.

        Step j runs, for every drafting request, the token at position start + j (its last token,
        then its own drafts) into the slot reserved there: the draft reads the target's KV of the
        text so far and its own KV of the drafts; the verify pass overwrites all of them.
        """
        drafts: dict[int, list[int]] = {i: [] for i in drafting}
        longest = max(chunks[i].num_lookahead_slots for i in drafting)
        for j in range(longest):
            active = [i for i in drafting if chunks[i].num_lookahead_slots > j]
            step_chunks = [type(chunks[i])(chunks[i].request, chunks[i].start + j, 1, True,
                                           draft_token_ids=tuple(drafts[i])) for i in active]
            logits = self.draft_runner.run(step_chunks, [block_tables[i] for i in active])
            for i, token in zip(active, logits.argmax(dim=-1).tolist()):
                drafts[i].append(int(token))
        return drafts

    # ----- verification ----------------------------------------------------------------------

    def sample(self, chunks: list, logits: Tensor, sampler, params: list, generators: list) -> list:
        """One entry per sampling chunk: a sampled token id (plain chunk) or a ``VerifiedTokens`` (verify chunk).

        logits: the runner's rows, in chunk order: one per plain chunk, 1 + k per verify chunk.
        """
        from course_lib.scheduler import VerifiedTokens

        starts, row = [], 0
        for chunk in chunks:
            starts.append(row)
            row += 1 + len(chunk.draft_token_ids)
        if row != logits.shape[0]:
            raise RuntimeError(f"the runner returned {logits.shape[0]} rows of logits, expected {row}")
        results: list[Any] = [None] * len(chunks)
        plain = [i for i, chunk in enumerate(chunks) if not chunk.draft_token_ids]
        if plain:
            sampled = sampler(logits[[starts[i] for i in plain]], [params[i] for i in plain],
                              [generators[i] for i in plain]).tolist()
            for i, token in zip(plain, sampled):
                results[i] = int(token)
        for i, chunk in enumerate(chunks):
            if not chunk.draft_token_ids:
                continue
            rows = logits[starts[i] : starts[i] + 1 + len(chunk.draft_token_ids)]
            emitted = self._verify(list(chunk.draft_token_ids), rows, params[i], generators[i])
            num_accepted = len(emitted) - 1
            self.num_drafted_tokens += len(chunk.draft_token_ids)
            self.num_accepted_tokens += num_accepted
            result = self.commit_fn(chunk.start, list(chunk.draft_token_ids), num_accepted, emitted[-1])
            new_token_ids, num_computed, num_to_free = _check_commit(chunk.request, chunk, result)
            results[i] = VerifiedTokens(new_token_ids, num_computed, num_to_free)
        return results

    def _verify(self, drafts: list[int], rows: Tensor, params, generator) -> list[int]:
        if params.is_greedy:
            return greedy_verify(drafts, rows)
        from course_lib.sampling import filtered_probs

        verify = _reference_or_locked(self.config.verify_fn, verify_draft, "verify_fn")
        target_probs = filtered_probs(rows, [params] * rows.shape[0]).cpu()
        # Both drafters propose deterministically: q is one-hot at each draft.
        draft_probs = F.one_hot(torch.tensor(drafts), target_probs.shape[1]).to(target_probs.dtype)
        accept_uniforms = torch.rand(len(drafts), generator=generator)
        sample_uniform = float(torch.rand(1, generator=generator))
        emitted = verify(drafts, draft_probs, target_probs, accept_uniforms, sample_uniform)
        return [int(token) for token in emitted]
