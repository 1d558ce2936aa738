"""Plots for prefill/decode disaggregation: latency distributions of simulated deployments."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from course_lib.sim.disaggregation import SimResult
from course_lib.viz import BLUE, GREEN, ORANGE, PURPLE, VERMILLION

__all__ = ["latency_distributions"]


def _cdf(ax, values: Sequence[float], colour: str, label: str) -> None:
    ordered = sorted(values)
    fractions = [(rank + 1) / len(ordered) for rank in range(len(ordered))]
    ax.step(ordered, fractions, where="post", color=colour, label=f"{label}: p99 {np.percentile(ordered, 99):.0f} ms")


def latency_distributions(results: Sequence[SimResult], title: str = "Colocated vs disaggregated") -> Figure:
    """Three CDFs over requests or tokens: TTFT, TPOT, and every gap between output tokens (ms).

    results: simulated deployments (``simulate_colocated`` / ``simulate_disaggregated``) of one workload.
    """
    if not results or not all(isinstance(result, SimResult) for result in results):
        raise ValueError("results must be a non-empty sequence of SimResult")
    fig = Figure(figsize=(12.0, 3.6), layout="constrained", dpi=100)
    axes = fig.subplots(1, 3)
    colours = (VERMILLION, ORANGE, BLUE, GREEN, PURPLE)
    panels = (("ttft_ms", "time to first token (ms)", "TTFT per request"),
              ("tpot_ms", "time per output token (ms)", "TPOT per request"),
              ("gaps_ms", "gap between consecutive tokens (ms)", "Every token gap"))
    for ax, (metric, xlabel, panel_title) in zip(axes, panels):
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        for number, result in enumerate(results):
            values = getattr(result, metric)
            if values:
                _cdf(ax, values, colours[number % len(colours)], result.name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction at or below")
        ax.set_title(panel_title, fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    axes[2].set_xscale("log")
    fig.suptitle(title, fontsize=11)
    return fig
