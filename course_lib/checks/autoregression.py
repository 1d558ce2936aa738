"""Checks for Lab 0.2, chapter 1 (autoregression, measured: what generating costs, and how to time it).

- ``generation_flops`` is compared with :func:`course_lib.roofline.generation_flops` (FLOPs pass by
  pass: 2 per parameter per token run, plus causal attention).
- ``fastest(function, repeats)`` gets a function lent by the check (``checks.share``) whose calls
  sleep for known, different times; the check counts the calls and times them on its side, so the
  answer must be the minimum of ``repeats`` calls, in seconds.
- ``time_step(model, config, token_ids, use_cache, repeats)`` gets the check's model, lent inside a
  wrapper that records, on the check's side, every forward call: how many tokens at which
  positions, whether a cache came along and how many tokens it held, and how long the call took.
  The *timed* calls must be the step the exercise describes (the whole context without a cache;
  one token at position ``cache.seq_len`` with one), ``repeats`` of them, and the time returned
  must be one the check saw (within the overhead of calling across processes).
- ``fit_step_time(context_lens, seconds)`` is compared with ``numpy.polyfit(..., 1)``, an
  implementation outside this course, and must raise ValueError for a line it cannot fit.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable

import numpy as np
import torch

from course_lib import roofline
from course_lib.checks import call_student, fail, one_thread, register_reference_names, require_own_implementation, share
from course_lib.checks import short_repr, smollm2
from course_lib.checks._shared import expect_raises, lend_config
from course_lib.checks.fixtures import mode, recorded_check, reference
from course_lib.model import ModelConfig

__all__ = [
    "check_fastest",
    "check_fit_step_time",
    "check_generation_flops",
    "check_time_step",
    "reference_generation_flops",
]

register_reference_names("generation_flops", "reference_generation_flops", "fastest", "time_step", "fit_step_time")

reference_generation_flops = reference(roofline.generation_flops)
"""FLOPs to generate ``new_tokens`` tokens (``course_lib.roofline.generation_flops``)."""

# A call across processes (when grading) adds a little to what the student's code measures.
CALL_OVERHEAD_S = 0.25


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):   # int or a numpy integer
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(value)
    return None


# ---------------------------------------------------------------------------------------------
# (a) FLOPs
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_generation_flops(student_generation_flops: Callable, config: ModelConfig, num_parameters: int,
                           prompt_len: int, new_tokens: int, use_cache: bool) -> None:
    """``student_generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache)``."""
    require_own_implementation(student_generation_flops, "generation_flops")
    got = call_student(student_generation_flops, "generation_flops", lend_config(config), num_parameters, prompt_len,
                       new_tokens, use_cache, copy_args=False)
    call = (f"generation_flops(config, num_parameters={num_parameters:,}, prompt_len={prompt_len}, "
            f"new_tokens={new_tokens}, use_cache={use_cache})")
    got_int = _as_int(got)
    if got_int is None:
        fail(f"{call} must return an int", expected="int", got=got,
             hint="FLOP counts here are whole numbers: use // when halving n * (n + 1).")
    expected = reference_generation_flops(config, num_parameters, prompt_len, new_tokens, use_cache)
    # The usual mistakes' counts, asked before the comparison where the kit may replay this check (its
    # recording must hold them); the grader, with the real reference, asks only when an answer is wrong.
    mistakes = _reference_usual_mistake_counts(config, num_parameters, prompt_len, new_tokens, use_cache) \
        if mode() != "instructor" else None
    if got_int == expected:
        return
    if mistakes is None:
        mistakes = _reference_usual_mistake_counts(config, num_parameters, prompt_len, new_tokens, use_cache)
    # Two mistakes can give the same count on small inputs: then the hint names both.
    hint = " Or: ".join(hint for count, hint in zip(mistakes, _MISTAKES) if count == got_int) or _RULE
    fail(call, expected=expected, got=got, hint=hint)


def _flops_of_passes(flops_per_key: int, num_parameters: int, lengths: list[int], first_decode: int,
                     keys_of_whole_pass: Callable[[int], int], keys_of_decode: Callable[[int], int]) -> int:
    """FLOPs of passes over sequences of ``lengths[i]`` tokens, the passes from index ``first_decode`` on
    counted as one-token decodes, with the given key counts: the check's model of the usual mistakes (each
    one changes one of these choices)."""
    total = 0
    for index, length in enumerate(lengths):
        cached_decode = index >= first_decode
        weights = 2 * num_parameters * (1 if cached_decode else length)
        total += weights + flops_per_key * (keys_of_decode(length) if cached_decode else keys_of_whole_pass(length))
    return total


def _usual_mistake_counts(config: ModelConfig, num_parameters: int, prompt_len: int, new_tokens: int,
                          use_cache: bool) -> list[int | None]:
    """The counts the usual mistakes give, in the order of ``_MISTAKES`` (None: not possible here).

    A reference of the check (wrapped below): it is stubbed in the students' editions, and the kit
    replays what it returned for the visible inputs."""
    flops_per_key = 4 * config.num_layers * config.num_q_heads * config.head_dim
    causal, square, without_self = (lambda n: n * (n + 1) // 2), (lambda n: n * n), (lambda n: n * (n - 1) // 2)
    itself, before_it, nothing = (lambda n: n), (lambda n: n - 1), (lambda n: 0)
    lengths = [prompt_len + step for step in range(new_tokens)]

    def count(passes: list[int], *, cache: bool = use_cache, whole=causal, decode=itself, prefill: bool = True) -> int:
        first_decode = (1 if prefill else 0) if cache else len(passes)
        return _flops_of_passes(flops_per_key, num_parameters, passes, first_decode, whole, decode)

    return [
        count([length + 1 for length in lengths]),
        count(lengths + [prompt_len + new_tokens]) if new_tokens else None,
        count(lengths[:-1]) if new_tokens else None,
        count(lengths, whole=without_self),
        count(lengths, whole=square),
        count(lengths, decode=before_it) if use_cache else None,
        count(lengths, prefill=False) if use_cache else None,
        count(lengths, whole=nothing, decode=nothing),
        count(lengths, cache=not use_cache),
    ]


_reference_usual_mistake_counts = reference(_usual_mistake_counts)

_MISTAKES = [
    "every pass is counted one token too long: pass k works on n = prompt_len + k - 1 tokens, so pass 1 runs the "
    "prompt alone (the first new token does not exist before it), pass 2 the prompt and one new token.",
    "one pass too many: new_tokens tokens take new_tokens passes (pass 1, the prompt's, already gives the first new "
    "token), and the last new token is never run through the model.",
    "one pass too few: pass 1 (the whole prompt) gives the first new token and every later pass one more, so "
    "new_tokens tokens take exactly new_tokens passes, the prompt's included.",
    "a token attends over itself too: the token at position j (from 0) sees j + 1 keys, so a whole pass over n "
    "tokens attends over 1 + 2 + ... + n = n * (n + 1) / 2 keys, not n * (n - 1) / 2.",
    "causal attention: the token at position j attends over j + 1 keys, so a pass over n tokens attends over "
    "1 + 2 + ... + n = n * (n + 1) / 2 keys in total, not n * n.",
    "a decode pass at sequence length n attends over n keys, the new token's own key included (the cache already "
    "holds it when attention runs), not n - 1.",
    "pass 1 is the prefill, not a decode step: even with a cache it runs all prompt_len prompt tokens as a "
    "whole-sequence pass (2 * N * P + attention over 1 + 2 + ... + P keys). Only passes 2, 3, ... run one token.",
    "the attention term is missing: each token also multiplies its query with every key it sees and its "
    "probabilities with every value, 4 * num_layers * num_q_heads * head_dim FLOPs per key.",
    "that is the count for the other value of use_cache: with a cache, only pass 1 runs the whole prompt; "
    "without one, every pass runs the whole sequence so far.",
]
_RULE = ("per pass: 2 * num_parameters * (tokens run) + 4 * num_layers * num_q_heads * head_dim * (keys attended, "
         "summed over the tokens run); pass k works on n = prompt_len + k - 1 tokens; with a cache, pass 1 runs the "
         "prompt and every later pass one token attending over n keys.")


# ---------------------------------------------------------------------------------------------
# (b) the fastest of a few runs
# ---------------------------------------------------------------------------------------------


class _SleepingFunction:
    """A function lent to ``fastest``: call i sleeps ``durations[i % len]`` seconds; the check times each call."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = durations
        self.measured: list[float] = []

    def __call__(self) -> None:
        start = time.perf_counter()
        time.sleep(self.durations[len(self.measured) % len(self.durations)])
        self.measured.append(time.perf_counter() - start)


def _fastest_allowance(shortest: float, mean: float, total: float) -> float:
    """How far above the check's own shortest time the student's answer may be (seconds).

    What the student measures includes a call across processes when grading, so some slack is
    due; but it must stay below the nearest wrong answer (the mean, then the total) to tell them
    apart. When every wrong answer is the right one (one call, or equal calls), the slack is the
    whole CALL_OVERHEAD_S: a busy grading machine must not fail a correct ``fastest``.
    """
    distinct = [wrong - shortest for wrong in (mean, total) if wrong - shortest > 1e-3]
    if not distinct:
        return CALL_OVERHEAD_S
    return min(CALL_OVERHEAD_S, 0.4 * min(distinct) + 0.005)


@recorded_check
def check_fastest(student_fastest: Callable, durations: list[float], repeats: int) -> None:
    """``student_fastest(function, repeats)`` on a function whose calls take ``durations`` (seconds, in turn)
    must call it ``repeats`` times and return the shortest time, in seconds. repeats < 1: ValueError."""
    require_own_implementation(student_fastest, "fastest")
    function = _SleepingFunction(list(durations))
    call = f"fastest(function, repeats={repeats}) [the function's calls take {durations} s in turn]"
    if repeats < 1:
        expect_raises(student_fastest, call, ValueError, share(function, "__call__"), repeats,
                      message_names=("repeats",),
                      hint="with no run there is no time to return: raise ValueError naming repeats.")
        return
    got = call_student(student_fastest, call, share(function, "__call__"), repeats, copy_args=False,
                       show_args=False)
    if len(function.measured) != repeats:
        fail(f"{call} called the function {len(function.measured)} times", expected=repeats,
             got=len(function.measured), hint="call it exactly repeats times, timing each call.")
    try:
        value = float(got)
    except (TypeError, ValueError):
        fail(f"{call} must return a number of seconds", expected="a float", got=short_repr(got))
    shortest, longest = min(function.measured), max(function.measured)
    mean = sum(function.measured) / len(function.measured)
    if 0.9 * shortest <= value <= shortest + _fastest_allowance(shortest, mean, sum(function.measured)):
        return
    hint = ("time each call with time.perf_counter() before and after it, and keep the smallest: other programs "
            "can only add time, so the fastest run is the best estimate of the work itself.")
    if math.isclose(value, shortest * 1000, rel_tol=0.2):
        hint = "return seconds, not milliseconds."
    elif len(function.measured) > 1 and math.isclose(value, mean, rel_tol=0.1):
        hint = "that is the mean; the noise of a shared machine only adds time, so keep the fastest run."
    elif math.isclose(value, longest, rel_tol=0.1):
        hint = "that is the slowest run; keep the fastest."
    elif value > longest * 1.5:
        hint = "that looks like the total of all runs; time each call on its own and keep the fastest."
    fail(f"{call}: the fastest call the check saw took {shortest:.4f} s", expected=f"about {shortest:.4f}",
         got=value, hint=hint)


# ---------------------------------------------------------------------------------------------
# (c) timing one step, with and without the cache
# ---------------------------------------------------------------------------------------------


class _TimedModel:
    """The check's model for ``time_step``: records each forward call (tokens, first position, the
    cache's length before the call, seconds) on the check's side. Lent with ``share(..., "__call__")``."""

    def __init__(self, model) -> None:
        self._model = model
        self.calls: list[dict[str, Any]] = []

    def __call__(self, input_ids, positions=None, attention=None, logits_indices=None):
        input_ids = torch.as_tensor(input_ids)
        num_tokens = int(input_ids.numel())
        first_position = 0 if positions is None else int(torch.as_tensor(positions).flatten()[0])
        cached_before = None if attention is None else int(attention.seq_len)
        start = time.perf_counter()
        logits = self._model(input_ids, positions, attention, logits_indices)
        self.calls.append({"tokens": num_tokens, "position": first_position, "cached": cached_before,
                           "seconds": time.perf_counter() - start})
        return logits


def _model_named(model: str):
    from course_lib.checks.decode import tiny_model

    if model == "smollm2":
        return smollm2()[0]
    if model == "tiny":
        return tiny_model(seed=2)
    raise ValueError(f"model must be 'smollm2' or 'tiny', got {model!r}")


@recorded_check
def check_time_step(student_time_step: Callable, context_len: int, use_cache: bool, *, repeats: int = 3,
                    model: str = "smollm2", seed: int = 0) -> None:
    """``student_time_step(model, config, token_ids, use_cache, repeats)`` with ``context_len`` token ids.

    Without a cache the timed calls are ``repeats`` forwards over all ``context_len`` tokens, no
    cache. With one, after a prefill of the first ``context_len - 1`` tokens into a cache, they are
    ``repeats`` calls of one token at position ``cache.seq_len``. The time returned must lie between
    the fastest timed call the check measured and the slowest (plus calling overhead).
    """
    require_own_implementation(student_time_step, "time_step")
    real_model = _model_named(model)
    generator = torch.Generator().manual_seed(seed)
    token_ids = torch.randint(0, real_model.config.vocab_size, (context_len,), generator=generator).tolist()
    timed = _TimedModel(real_model)
    call = (f"time_step(model, config, <{context_len} token ids>, use_cache={use_cache}, repeats={repeats}) "
            f"on {model}")
    with one_thread():
        got = call_student(student_time_step, call, share(timed, "__call__"), lend_config(real_model.config),
                           token_ids, use_cache, repeats, copy_args=False, show_args=False,
                           hints={AttributeError: "the model you are given is only callable: read what you need "
                                                  "from config (KVCache(config, max_seq_len) stores fp32, the "
                                                  "model's dtype), not from the model's attributes."})
    calls = timed.calls
    seen = [(c["tokens"], c["position"], c["cached"]) for c in calls]
    if use_cache:
        steps = [c for c in calls if c["tokens"] == 1 and c["cached"] is not None and c["position"] == c["cached"]
                 and c["position"] >= context_len - 1]
        prefills = [c for c in calls if c["cached"] == 0 and c["tokens"] == context_len - 1]
        if context_len > 1 and not prefills:
            fail(f"{call}: no forward call put the first {context_len - 1} tokens into a cache",
                 expected=f"a call of {context_len - 1} tokens at position 0 with an empty cache",
                 got=f"calls (tokens, first position, tokens cached before): {seen[:8]}",
                 hint="before timing, fill a KVCache with token_ids[:-1] in one forward call (not timed): the "
                      "decode step you time needs the keys and values of the whole context.")
        wanted = "one token at position cache.seq_len, with the cache holding the context"
        hint = ("time decode steps: model(last token, cache.next_positions(1), cache, ...), repeats times; "
                "running the whole context again is the recomputation the cache avoids.")
    else:
        steps = [c for c in calls if c["tokens"] == context_len and c["cached"] is None and c["position"] == 0]
        wanted = f"a forward over all {context_len} tokens without a cache"
        hint = "without a cache, each timed step is one forward over the whole context: model(all token ids)."
    if len(steps) != repeats or len(calls) != len(steps) + (1 if use_cache and context_len > 1 else 0):
        fail(f"{call}: the model ran other calls than the step to time, {repeats} times",
             expected=f"{repeats} calls of {wanted}" + (" (after one prefill call)" if use_cache else ""),
             got=f"calls (tokens, first position, tokens cached before): {seen[:8]}", hint=hint)
    try:
        value = float(got)
    except (TypeError, ValueError):
        fail(f"{call} must return a number of seconds", expected="a float", got=short_repr(got))
    shortest = min(c["seconds"] for c in steps)
    longest = max(c["seconds"] for c in steps)
    if not 0.8 * shortest <= value <= longest + CALL_OVERHEAD_S:
        fail(f"{call}: the timed calls took {shortest:.4f} to {longest:.4f} s as the check measured them",
             expected=f"the fastest of them, about {shortest:.4f} s", got=value,
             hint="return the fastest of the timed steps, in seconds (your fastest from the exercise above); "
                  "do not include the prefill that fills the cache.")


# ---------------------------------------------------------------------------------------------
# (d) a line through the measurements
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_fit_step_time(student_fit_step_time: Callable, context_lens: list[float], seconds: list[float]) -> None:
    """``student_fit_step_time(context_lens, seconds)`` -> (fixed, per_token), compared with numpy.polyfit;
    mismatched lengths or fewer than two distinct lengths must raise ValueError."""
    require_own_implementation(student_fit_step_time, "fit_step_time")
    call = f"fit_step_time({short_repr(context_lens)}, {short_repr(seconds)})"
    if len(context_lens) != len(seconds) or len(set(context_lens)) < 2:
        expect_raises(student_fit_step_time, call, ValueError, list(context_lens), list(seconds),
                      hint="a line needs two different lengths and one time per length: raise ValueError "
                           "(naming what is wrong) instead of dividing by zero.")
        return
    got = call_student(student_fit_step_time, call, list(context_lens), list(seconds), show_args=False)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{call} must return a pair (fixed, per_token)", expected="(fixed, per_token)", got=short_repr(got))
    slope, intercept = np.polyfit(np.asarray(context_lens, dtype=float), np.asarray(seconds, dtype=float), 1)
    scale = max(abs(value) for value in seconds) or 1.0
    for name, value, expected in (("fixed", got[0], intercept), ("per_token", got[1], slope)):
        try:
            ok = math.isclose(float(value), float(expected), rel_tol=1e-6, abs_tol=1e-9 * scale)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            hint = ("least squares: per_token = sum((x - mean_x) * (y - mean_y)) / sum((x - mean_x) ** 2), "
                    "fixed = mean_y - per_token * mean_x.")
            if math.isclose(float(got[0]), float(slope), rel_tol=1e-6) if _is_number(got[0]) else False:
                hint = "return (fixed, per_token) in that order: the intercept first, then the slope."
            fail(f"{call}: wrong {name}", expected=float(expected), got=value, hint=hint)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

