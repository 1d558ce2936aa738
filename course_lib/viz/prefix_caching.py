"""Plots for prefix caching: what a shared system prompt saves in time and in KV blocks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from course_lib.viz import BLUE, GREEN, VERMILLION

__all__ = ["prefix_cache_savings"]


def prefix_cache_savings(ttft_ms_by_policy: Mapping[str, Sequence[float]], blocks_by_policy: Mapping[str, int],
                         block_size: int, title: str = "A shared system prompt, with and without prefix caching") -> Figure:
    """Left: each user's TTFT (ms) under each policy. Right: the KV blocks held at the peak of the run.

    ttft_ms_by_policy: {policy: TTFT of each user, in the same user order}.
    blocks_by_policy: {policy: peak number of KV blocks in use}; block_size labels the right axis.
    """
    if not ttft_ms_by_policy or set(ttft_ms_by_policy) != set(blocks_by_policy):
        raise ValueError("ttft_ms_by_policy and blocks_by_policy must be non-empty and name the same policies")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    fig = Figure(figsize=(10.0, 3.6), layout="constrained", dpi=100)
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    colours = (VERMILLION, GREEN, BLUE)
    policies = list(ttft_ms_by_policy)
    width = 0.8 / len(policies)
    for number, policy in enumerate(policies):
        ttfts = list(ttft_ms_by_policy[policy])
        positions = [user + (number - (len(policies) - 1) / 2) * width for user in range(len(ttfts))]
        left.bar(positions, ttfts, width=width, color=colours[number % len(colours)], label=policy)
    tallest = max(max(ttfts, default=0.0) for ttfts in ttft_ms_by_policy.values())
    left.set_ylim(0, tallest * 1.3 or 1.0)  # room for the legend above the bars
    left.set_xlabel("user (request)")
    left.set_ylabel("time to first token (ms)")
    left.set_title("TTFT per user", fontsize=10)
    left.legend(fontsize=8)
    bars = right.bar(policies, [blocks_by_policy[policy] for policy in policies],
                     color=[colours[number % len(colours)] for number in range(len(policies))])
    right.bar_label(bars)
    right.set_xlabel("policy")
    right.set_ylabel("peak KV blocks in use")
    right.set_title(f"KV memory held (blocks of {block_size} tokens)", fontsize=10)
    fig.suptitle(title, fontsize=11)
    return fig
