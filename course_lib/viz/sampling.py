"""Plots for the sampling controls (Lab 0.1, chapter 5): one next-token distribution, filter by filter."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

__all__ = ["filter_explorer", "plot_filter_stages", "token_label"]


def token_label(decode_token_bytes: Callable[[int], bytes], token_id: int) -> str:
    """A short printable label for one token: its text with spaces and newlines made visible."""
    text = decode_token_bytes(token_id).decode("utf-8", errors="replace")
    return repr(text.replace(" ", "\u2423"))[1:-1] or f"<{token_id}>"


def plot_filter_stages(stages: Sequence[tuple[str, torch.Tensor]], labels: Callable[[int], str], *,
                       top_n: int = 15, title: str = "One next-token distribution, filter by filter") -> Figure:
    """One bar chart per stage: the probability of the ``top_n`` most likely tokens after that stage.

    stages: (name, logits ``[vocab]``) pairs, the first being the raw distribution; filtered tokens are
    -inf (probability 0). labels: token id -> the text shown under its bar. The same ``top_n`` tokens
    (the most likely under the first stage) are shown in every panel; a filtered one has no bar and a
    red cross on the axis. Each panel's title says how many tokens of the whole vocabulary are still possible.
    Returns the Figure.
    """
    if not stages:
        raise ValueError("stages must hold at least one (name, logits) pair")
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    first = torch.softmax(stages[0][1].double(), dim=-1)
    shown = torch.topk(first, min(top_n, first.numel())).indices.tolist()
    names = [labels(token_id) for token_id in shown]
    figure, axes = plt.subplots(len(stages), 1, figsize=(9, 2.1 * len(stages) + 0.6), sharex=True, squeeze=False)
    for axis, (name, logits) in zip(axes[:, 0], stages):
        probs = torch.softmax(logits.double(), dim=-1)
        num_possible = int((probs > 0).sum())
        heights = [float(probs[token_id]) for token_id in shown]
        axis.bar(range(len(shown)), heights, color="tab:blue")
        filtered = [index for index, token_id in enumerate(shown) if probs[token_id] == 0]
        if filtered:
            # A filtered token has no bar; a cross on the axis shows it was there and is gone.
            axis.plot(filtered, [0.0] * len(filtered), "x", color="tab:red", label="filtered out")
            axis.legend(loc="upper right", fontsize=8)
        axis.set_ylabel("probability")
        axis.set_ylim(0, max(max(heights), 1e-9) * 1.15)
        axis.set_title(f"{name}: {num_possible:,} tokens possible", fontsize=10, loc="left")
    last = axes[-1, 0]
    last.set_xticks(range(len(shown)))
    last.set_xticklabels(names, rotation=45, ha="right", fontsize=9)
    last.set_xlabel(f"the {len(shown)} most likely next tokens before filtering (\u2423 = space)")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def filter_explorer(logits: torch.Tensor, labels: Callable[[int], str], apply_temperature: Callable,
                    top_k_filter: Callable, top_p_filter: Callable, min_p_filter: Callable, *, top_n: int = 20):
    """Sliders for temperature, top-k, top-p and min-p over one next-token distribution, through your filters.

    logits: ``[1, vocab]``; labels: token id -> text. Shows the ``top_n`` most likely tokens of the raw
    distribution: their probability after the filters (bars) and before them (outlines).
    """
    from course_lib.viz.widgets import FigureExplorer, float_slider, int_slider

    raw = torch.softmax(logits[0].double(), dim=-1)
    shown = torch.topk(raw, min(top_n, raw.numel())).indices.tolist()
    names = [labels(token_id) for token_id in shown]

    def draw(temperature: float, top_k: int, top_p: float, min_p: float) -> Figure:
        filtered = min_p_filter(top_p_filter(top_k_filter(apply_temperature(logits.clone(), temperature), top_k),
                                             top_p), min_p)
        probs = torch.softmax(filtered[0].double(), dim=-1)
        figure = Figure(figsize=(9, 3.6), layout="constrained")
        axis = figure.subplots()
        axis.bar(range(len(shown)), [float(raw[i]) for i in shown], fill=False, edgecolor="grey",
                 label="raw (T = 1, no filter)")
        axis.bar(range(len(shown)), [float(probs[i]) for i in shown], color="tab:blue", alpha=0.85,
                 label="after your filters")
        axis.set_xticks(range(len(shown)), names, rotation=45, ha="right", fontsize=8)
        axis.set_ylabel("probability")
        axis.legend(fontsize=8)
        axis.set_title(f"T = {temperature:.2f}, top-k {top_k or 'off'}, top-p {top_p:.2f}, min-p {min_p:.2f}: "
                       f"{int((probs > 0).sum()):,} tokens of {probs.numel():,} still possible", fontsize=10)
        return figure

    return FigureExplorer(draw, {
        "temperature": float_slider("temperature", 0.1, 2.0, 1.0, 0.05),
        "top_k": int_slider("top-k (0 = off)", 0, 100, 0),
        "top_p": float_slider("top-p", 0.05, 1.0, 1.0, 0.05),
        "min_p": float_slider("min-p", 0.0, 0.5, 0.0, 0.01),
    }, name="sampling filter explorer")
