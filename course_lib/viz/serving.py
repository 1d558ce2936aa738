"""Figures of Lab 0.5 (serving): latency against offered load, per-policy bars."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["latency_vs_load", "policy_bars"]


def latency_vs_load(points: Sequence[tuple[float, dict]], *, slo=None, knee: float | None = None, title: str = ""):
    """p50 and p99 TTFT and end-to-end latency, and delivered throughput, against offered requests/s.

    points: (offered requests per second, ``course_lib.loadtest.summarize`` result) pairs.
    slo: draws the TTFT bound. knee: marks that offered load with a vertical line.
    """
    import matplotlib.pyplot as plt

    points = sorted(points, key=lambda p: p[0])
    rates = [rate for rate, _ in points]
    figure, (latency_axis, throughput_axis) = plt.subplots(1, 2, figsize=(10, 3.8))
    for metric, style in (("ttft", "o-"), ("e2e", "s--")):
        for stat, alpha in (("p50", 0.55), ("p99", 1.0)):
            values = [s[metric][stat] if s[metric] else float("nan") for _, s in points]
            latency_axis.plot(rates, values, style, alpha=alpha, label=f"{metric.upper()} {stat}")
    if slo is not None:
        latency_axis.axhline(slo.ttft_s, color="gray", linestyle=":", label="TTFT SLO")
    latency_axis.set_yscale("log")
    latency_axis.set_xlabel("offered load (requests/s)")
    latency_axis.set_ylabel("latency (s)")
    latency_axis.legend(fontsize=8)
    throughput_axis.plot(rates, [s["requests_per_s"] for _, s in points], "o-", label="completed/s")
    throughput_axis.plot(rates, [s["goodput_per_s"] for _, s in points], "s--", label="goodput/s")
    throughput_axis.plot(rates, rates, ":", color="gray", label="offered")
    throughput_axis.set_xlabel("offered load (requests/s)")
    throughput_axis.set_ylabel("requests/s")
    throughput_axis.legend(fontsize=8)
    for axis in (latency_axis, throughput_axis):
        if knee is not None:
            axis.axvline(knee, color="red", alpha=0.4, label="knee")
        axis.grid(alpha=0.3)
    figure.suptitle(title or "Latency and throughput against offered load")
    figure.tight_layout()
    return figure


def policy_bars(values: dict[str, dict[str, float]], *, title: str = ""):
    """One panel per metric, one bar per policy: values[policy][metric] -> number."""
    import matplotlib.pyplot as plt

    policies = list(values)
    metrics = list(next(iter(values.values())))
    figure, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.2))
    axes = [axes] if len(metrics) == 1 else list(axes)
    for axis, metric in zip(axes, metrics):
        axis.bar(policies, [values[p][metric] for p in policies], color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"][: len(policies)])
        axis.set_title(metric, fontsize=10)
        axis.tick_params(axis="x", labelrotation=20, labelsize=8)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    return figure
