"""Measuring a model step on this machine: the fastest of a few runs, one step's time, a line fit.

Timings on a shared computer are noisy, and the noise only ever adds time (another program, a
cache miss, the garbage collector): the *fastest* of a few runs is the best estimate of what the
work itself costs. ``time_step`` times the step that produces the token after a context of
``len(token_ids)`` tokens, either by running the whole context (no cache) or by running one token
over a ``KVCache`` that holds the rest (a decode step). ``fit_step_time`` fits
``seconds = fixed + per_token * context_len`` by least squares, the cost model later chapters use.

These are the reference answers of Lab 0.2 chapter 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from course_lib.exercises import exercise
from course_lib.kv_cache import KVCache

__all__ = ["fastest", "fit_step_time", "time_step"]


@exercise("lab02-prefill-vs-decode", "01_autoregression", "fastest")
def fastest(function: Callable[[], object], repeats: int) -> float:
    """The shortest wall-clock time, in seconds, of ``repeats`` calls of ``function()``.

    Raises ValueError when repeats < 1.
    """
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


@exercise("lab02-prefill-vs-decode", "01_autoregression", "time_step")
def time_step(model, config, token_ids: Sequence[int], use_cache: bool, repeats: int = 3) -> float:
    """Seconds of the step that produces the token after ``token_ids`` (n = len(token_ids) >= 1).

    model: called as ``model(input_ids, positions, attention, logits_indices=...)``; config: its
    ModelConfig. Without a cache the step is one forward over all n tokens, timed ``repeats``
    times. With one, a ``KVCache`` is filled with the first n - 1 tokens (not timed) and then
    ``repeats`` decode steps are timed, each running one token at position ``cache.seq_len``
    (n - 1, n, ...). Returns the fastest time.
    """
    last_row = torch.tensor([-1])
    context = torch.tensor(list(token_ids))
    with torch.inference_mode():
        if not use_cache:
            return fastest(lambda: model(context, None, None, logits_indices=last_row), repeats)
        cache = KVCache(config, max_seq_len=len(context) + repeats)
        if len(context) > 1:
            model(context[:-1], cache.next_positions(len(context) - 1), cache, logits_indices=last_row)
        last_token = context[-1:]
        return fastest(lambda: model(last_token, cache.next_positions(1), cache, logits_indices=last_row), repeats)


@exercise("lab02-prefill-vs-decode", "01_autoregression", "fit_step_time")
def fit_step_time(context_lens: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares line ``seconds ~ fixed + per_token * context_len``: returns (fixed, per_token).

    Raises ValueError when the two lists differ in length or hold fewer than two distinct lengths.
    """
    if len(context_lens) != len(seconds):
        raise ValueError(f"context_lens and seconds must have the same length, got {len(context_lens)} and "
                         f"{len(seconds)}")
    if len(set(context_lens)) < 2:
        raise ValueError("context_lens must hold at least two distinct lengths to fit a line")
    count = len(context_lens)
    mean_x = sum(context_lens) / count
    mean_y = sum(seconds) / count
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(context_lens, seconds))
    variance = sum((x - mean_x) ** 2 for x in context_lens)
    per_token = covariance / variance
    return mean_y - per_token * mean_x, per_token
