"""Figures of Lab 0.5 (serving): latency against offered load, per-policy bars, KV use per replica over time."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["kv_timelines", "latency_vs_load", "policy_bars"]


def _seconds_axis(axis) -> None:
    """A log-scale latency axis labelled in plain seconds (0.1 s, 1 s, 10 s), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g} s"))
    axis.yaxis.set_minor_formatter(NullFormatter())


def latency_vs_load(points: Sequence[tuple[float, dict]], *, slo=None, knee: float | None = None,
                    capacity: float | None = None, high: str = "p90", title: str = ""):
    """Median and ``high`` percentile TTFT and end-to-end latency, and delivered throughput, against offered load.

    points: (offered requests per second, ``course_lib.loadtest.summarize`` result) pairs.
    slo: draws the TTFT bound. knee: marks that offered load (the last one that met the SLO).
    capacity: marks the server's capacity (requests/s) on both panels. high: "p90" or "p99"
    (use p99 only with a few hundred requests per point).
    """
    import matplotlib.pyplot as plt

    if high not in ("p90", "p99"):
        raise ValueError(f"high must be 'p90' or 'p99', got {high!r}")
    points = sorted(points, key=lambda p: p[0])
    rates = [rate for rate, _ in points]
    figure, (latency_axis, throughput_axis) = plt.subplots(1, 2, figsize=(10.5, 4))
    for metric, style in (("ttft", "o-"), ("e2e", "s--")):
        for stat, alpha in (("p50", 0.55), (high, 1.0)):
            values = [s[metric][stat] if s[metric] else float("nan") for _, s in points]
            latency_axis.plot(rates, values, style, alpha=alpha, label=f"{metric.upper()} {stat}")
    if slo is not None:
        latency_axis.axhline(slo.ttft_s, color="gray", linestyle=":", label=f"TTFT SLO ({slo.ttft_s:g} s)")
    _seconds_axis(latency_axis)
    latency_axis.set_ylabel("latency (log scale)")
    latency_axis.set_title("latency of the completed requests", fontsize=10)
    throughput_axis.plot(rates, [s["requests_per_s"] for _, s in points], "o-", label="completed/s")
    throughput_axis.plot(rates, [s["goodput_per_s"] for _, s in points], "s--", label="goodput/s (met the SLO)")
    throughput_axis.plot(rates, rates, ":", color="gray", label="offered/s")
    throughput_axis.set_ylabel("requests/s")
    throughput_axis.set_title("what the server delivered", fontsize=10)
    for axis in (latency_axis, throughput_axis):
        if capacity is not None:
            axis.axvline(capacity, color="black", alpha=0.35, linestyle="--", label=f"capacity \u03bc = {capacity:.1f}/s")
        if knee is not None:
            axis.axvline(knee, color="red", alpha=0.5, label=f"knee = {knee:g}/s (last load meeting the SLO)")
        axis.set_xlabel("offered load (requests/s)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7.5)
    if capacity is not None:
        throughput_axis.axhline(capacity, color="black", alpha=0.35, linestyle="--")
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


def kv_timelines(timelines: dict[str, Sequence[tuple[float, int, int, int]]], num_blocks: int, *, title: str = "",
                 notes: dict[str, str] | None = None):
    """One panel per policy: each replica's KV blocks in use over time, red where requests waited on it.

    timelines: policy -> (ms, replica, blocks used, requests waiting) reports (``SimResult.timeline``,
    or a live trace). num_blocks: each replica's pool, drawn as a dashed line. notes: a line of text
    under each panel's title (say, its stranded share).
    """
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(timelines), figsize=(3.9 * len(timelines), 3.1), sharey=True, squeeze=False)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3"]
    for axis, (policy, timeline) in zip(axes[0], timelines.items()):
        replicas = sorted({replica for _, replica, _, _ in timeline})
        for replica in replicas:
            reports = [(t / 1000, used, waiting) for t, r, used, waiting in timeline if r == replica]
            axis.plot([t for t, _, _ in reports], [used for _, used, _ in reports], color=colors[replica % len(colors)],
                      linewidth=0.9, label=f"replica {replica}")
            waited = [(t, used) for t, used, waiting in reports if waiting > 0]
            if waited:
                axis.scatter([t for t, _ in waited], [used for _, used in waited], s=6, color="#c44e52", zorder=3)
        axis.axhline(num_blocks, color="gray", linestyle="--", linewidth=0.8)
        axis.set_title(policy + (f"\n{notes[policy]}" if notes and policy in notes else ""), fontsize=9)
        axis.set_xlabel("seconds")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"KV blocks in use (pool {num_blocks})")
    axes[0][0].legend(fontsize=7, loc="lower right")
    figure.suptitle(title or "KV blocks in use per replica; red: requests waiting on that replica")
    figure.tight_layout()
    return figure
