"""Plots for chunked prefill: what each step's batch holds, and the gaps decodes see between tokens."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from course_lib.viz import BLUE, GREY, ORANGE, PALETTE, VERMILLION

__all__ = ["batch_composition", "budget_explorer", "token_gaps"]


def _figure(ncols: int, width: float, height: float):
    fig = Figure(figsize=(width, height), layout="constrained", dpi=100)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, axes


def batch_composition(batches: Sequence[Sequence[tuple[Hashable, int]]], decode_ids: Sequence[Sequence[Hashable]],
                      token_budget: int, title: str = "What each step runs") -> Figure:
    """Stacked bars, one per step: decode tokens (grey) under each prompt's chunk (one colour per prompt).

    batches: per step, the ``(request_id, num_tokens)`` pairs of ``build_batch``.
    decode_ids: per step, the ids that were decodes in that step (drawn grey).
    token_budget: drawn as a dashed line.
    """
    if len(batches) != len(decode_ids):
        raise ValueError(f"batches and decode_ids must have one entry per step, got {len(batches)} and {len(decode_ids)}")
    if not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(f"token_budget must be an integer >= 1, got {token_budget!r}")
    fig, (ax,) = _figure(1, 8.0, 3.4)
    prompt_colours: dict[Hashable, str] = {}
    prompt_palette = [colour for colour in PALETTE if colour != GREY]
    for step, (batch, decodes) in enumerate(zip(batches, decode_ids)):
        decodes = set(decodes)
        num_decode_tokens = sum(num_tokens for request_id, num_tokens in batch if request_id in decodes)
        ax.bar(step, num_decode_tokens, color=GREY, edgecolor="black", linewidth=0.4,
               label="decodes (1 token each)" if step == 0 else None)
        bottom = num_decode_tokens
        for request_id, num_tokens in batch:
            if request_id in decodes:
                continue
            new = request_id not in prompt_colours
            if new:
                prompt_colours[request_id] = prompt_palette[len(prompt_colours) % len(prompt_palette)]
            ax.bar(step, num_tokens, bottom=bottom, color=prompt_colours[request_id], edgecolor="black", linewidth=0.4,
                   label=f"prompt {request_id}" if new else None)
            bottom += num_tokens
    ax.axhline(token_budget, color="black", linestyle="--", linewidth=0.8, label=f"token budget ({token_budget})")
    ax.set_xlabel("engine step")
    ax.set_ylabel("tokens in the step")
    ax.set_xticks(range(len(batches)))
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    return fig


def token_gaps(gaps_ms_by_policy: Mapping[str, Sequence[float]],
               title: str = "Gaps between a running request's tokens") -> Figure:
    """Left: every gap between consecutive output tokens, in time order. Right: median, p90 and worst gap.

    gaps_ms_by_policy: {policy name: gaps in ms}, e.g. measured on the engine with and without chunking.
    The tail is shown as p90 and the worst gap, not p99: a p99 needs hundreds of gaps to differ from
    the worst one, and a scenario of a few requests gives tens.
    """
    if not gaps_ms_by_policy or any(len(gaps) == 0 for gaps in gaps_ms_by_policy.values()):
        raise ValueError("gaps_ms_by_policy must map each policy name to a non-empty list of gaps (ms)")
    fig, (left, right) = _figure(2, 10.0, 3.6)
    colours = (VERMILLION, BLUE, ORANGE)
    width = 0.8 / len(gaps_ms_by_policy)
    stats = ("median", "p90", "worst")
    for number, (policy, gaps) in enumerate(gaps_ms_by_policy.items()):
        colour = colours[number % len(colours)]
        left.plot(range(len(gaps)), list(gaps), marker=".", linewidth=0.8, color=colour, label=policy)
        values = [float(np.percentile(list(gaps), 50)), float(np.percentile(list(gaps), 90)), max(gaps)]
        positions = [index + (number - (len(gaps_ms_by_policy) - 1) / 2) * width for index in range(len(stats))]
        bars = right.bar(positions, values, width=width, color=colour, label=policy)
        right.bar_label(bars, fmt="%.0f", fontsize=8)
    left.set_xlabel("output token (all running requests, in time order)")
    left.set_ylabel("gap since the request's previous token (ms)")
    left.set_title(title, fontsize=10)
    left.legend(fontsize=8)
    right.set_xticks(range(len(stats)), stats)
    counts = sorted({len(gaps) for gaps in gaps_ms_by_policy.values()})
    right.set_xlabel(f"statistic over all {' / '.join(str(count) for count in counts)} gaps")
    right.set_ylabel("gap (ms)")
    right.set_title("Tail of the gaps", fontsize=10)
    right.legend(fontsize=8)
    return fig


def budget_explorer(run_steps, budgets: Sequence[int] = (8, 12, 16, 24, 32, 64)):
    """A token-budget slider and a chunking switch: the batches ``run_steps(budget, chunked)`` builds.

    run_steps: returns (per step the (request_id, num_tokens) batch, per step the decode ids),
    e.g. the notebook's replay of your ``build_batch``.
    """
    from course_lib.viz.widgets import FigureExplorer, choice

    def draw(token_budget: int, chunked: str) -> Figure:
        batches, decodes = run_steps(token_budget, chunked == "chunked")
        return batch_composition(batches, decodes, token_budget,
                                 title=f"budget {token_budget}, {chunked}: {len(batches)} steps shown")

    return FigureExplorer(draw, {
        "token_budget": choice("token budget", list(budgets), budgets[2] if len(budgets) > 2 else budgets[0]),
        "chunked": choice("prompts", ["chunked", "whole"], "chunked"),
    }, name="batch budget explorer")
