"""Plots for Lab 0.2, chapter 1: the cost of generating token by token, with and without a KV cache.

Both functions take numbers computed elsewhere (the student's operation count, or timings measured
on SmolLM2) and return a ``matplotlib.figure.Figure`` with two panels: per step on the left,
accumulated over the whole generation on the right.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from course_lib.viz import BLUE, VERMILLION, _new_figure

__all__ = ["generation_cost_plot", "generation_time_explorer", "step_and_total_time_plot"]


def _as_curve(name: str, values: Sequence[float], length: int) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.shape != (length,):
        raise ValueError(f"{name} must hold {length} numbers (one per x value), got shape {array.shape}")
    if np.any(array < 0) or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must hold finite numbers >= 0")
    return array


def generation_cost_plot(
    new_tokens: Sequence[int],
    step_without_cache: Sequence[float],
    step_with_cache: Sequence[float],
    *,
    unit: str = "tokens run",
    title: str = "Generating with and without a KV cache",
) -> Figure:
    """Cost of pass k (left) and the total up to k (right) against k, without and with a cache.

    new_tokens: the pass numbers k (1, 2, ...); step_without_cache / step_with_cache: the cost of
    pass k in ``unit`` (tokens, FLOPs...). The totals are cumulative sums.
    """
    steps = np.asarray(new_tokens)
    if steps.ndim != 1 or len(steps) < 2:
        raise ValueError("new_tokens must be a 1-D sequence of at least two pass numbers")
    without = _as_curve("step_without_cache", step_without_cache, len(steps))
    with_cache = _as_curve("step_with_cache", step_with_cache, len(steps))
    fig, (ax_step, ax_total) = _new_figure(1, 2, width=11, height=3.8)
    ax_step.plot(steps, without, color=VERMILLION, label="no cache")
    ax_step.plot(steps, with_cache, color=BLUE, label="KV cache")
    ax_step.set_xlabel("pass k (token number being generated)")
    ax_step.set_ylabel(f"{unit} in pass k")
    ax_step.set_title("Cost of one pass")
    ax_total.plot(steps, np.cumsum(without), color=VERMILLION, label="no cache: grows like T²")
    ax_total.plot(steps, np.cumsum(with_cache), color=BLUE, label="KV cache: grows like T")
    ratio = np.cumsum(without)[-1] / max(np.cumsum(with_cache)[-1], 1e-300)
    ax_total.set_xlabel("tokens generated (T)")
    ax_total.set_ylabel(f"{unit}, total")
    ax_total.set_title(f"Total: {ratio:.1f}x more work without a cache at T = {steps[-1]}")
    for ax in (ax_step, ax_total):
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def step_and_total_time_plot(
    measured_lengths: Sequence[int],
    step_seconds_without_cache: Sequence[float],
    step_seconds_with_cache: Sequence[float],
    generated: Sequence[int],
    total_seconds_without_cache: Sequence[float],
    total_seconds_with_cache: Sequence[float],
) -> Figure:
    """Measured time of one step against the sequence length (left, markers), and the total time to
    generate T tokens built from those steps (right).

    measured_lengths: sequence lengths at which one step was timed; step_seconds_*: the time of a
    step at each (seconds). generated: values of T; total_seconds_*: the time to generate T tokens.
    """
    lengths = np.asarray(measured_lengths)
    if lengths.ndim != 1 or len(lengths) < 2:
        raise ValueError("measured_lengths must be a 1-D sequence of at least two lengths")
    step_without = _as_curve("step_seconds_without_cache", step_seconds_without_cache, len(lengths))
    step_with = _as_curve("step_seconds_with_cache", step_seconds_with_cache, len(lengths))
    tokens = np.asarray(generated)
    total_without = _as_curve("total_seconds_without_cache", total_seconds_without_cache, len(tokens))
    total_with = _as_curve("total_seconds_with_cache", total_seconds_with_cache, len(tokens))
    fig, (ax_step, ax_total) = _new_figure(1, 2, width=11, height=3.8)
    ax_step.plot(lengths, step_without * 1e3, "o-", color=VERMILLION, label="no cache: run all tokens")
    ax_step.plot(lengths, step_with * 1e3, "s-", color=BLUE, label="KV cache: run the new token")
    ax_step.set_xlabel("sequence length when the step runs (tokens)")
    ax_step.set_ylabel("time of one step (ms)")
    ax_step.set_title("One step, measured on SmolLM2")
    ax_total.plot(tokens, total_without, color=VERMILLION, label="no cache")
    ax_total.plot(tokens, total_with, color=BLUE, label="KV cache")
    ax_total.set_xlabel("tokens generated (T)")
    ax_total.set_ylabel("total time (s)")
    ax_total.set_title("Generating T tokens: the sum of the steps")
    for ax in (ax_step, ax_total):
        ax.legend(fontsize=8)
    return fig


def generation_time_explorer(measured_lengths: Sequence[int], step_seconds_without_cache: Sequence[float],
                             step_seconds_with_cache: Sequence[float]):
    """Sliders for the prompt length P and the tokens generated T: the total time, step by step.

    The time of a step at any length is interpolated between the measured ones. Without a cache
    pass k runs P + k - 1 tokens; with one, pass 1 is the prefill of P tokens (a step without a
    cache at length P) and every later pass a decode step.
    """
    from course_lib.viz.widgets import FigureExplorer, int_slider

    lengths = np.asarray(measured_lengths, dtype=float)
    without = _as_curve("step_seconds_without_cache", step_seconds_without_cache, len(lengths))
    with_cache = _as_curve("step_seconds_with_cache", step_seconds_with_cache, len(lengths))
    longest = int(lengths.max())

    def draw(prompt_len: int, new_tokens: int) -> Figure:
        new_tokens = max(1, min(new_tokens, longest - prompt_len + 1))
        passes = np.arange(1, new_tokens + 1)
        context = prompt_len + passes - 1
        step_without = np.interp(context, lengths, without)
        step_with = np.interp(context, lengths, with_cache)
        step_with[0] = np.interp(prompt_len, lengths, without)   # pass 1 is the prefill
        total_without, total_with = np.cumsum(step_without), np.cumsum(step_with)
        tokens_without = int(np.sum(context))
        tokens_with = prompt_len + new_tokens - 1
        fig, axes = _new_figure(width=8, height=3.6)
        axes.plot(passes, total_without, color=VERMILLION, label="no cache")
        axes.plot(passes, total_with, color=BLUE, label="KV cache")
        axes.set_xlabel("tokens generated (T)")
        axes.set_ylabel("total time (s), from measured steps")
        axes.set_title(f"P = {prompt_len}, T = {new_tokens}: {total_without[-1] / total_with[-1]:.1f}x faster with the "
                       f"cache; {tokens_without / tokens_with:.1f}x fewer tokens run", fontsize=10)
        axes.legend(fontsize=8)
        return fig

    return FigureExplorer(draw, {
        "prompt_len": int_slider("prompt tokens P", 1, max(1, longest // 2), min(8, longest // 2)),
        "new_tokens": int_slider("tokens generated T", 1, longest, longest // 2),
    }, name="generation time explorer")
