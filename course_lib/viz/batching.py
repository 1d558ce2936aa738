"""Figures for the batching chapter: who runs in which step, and latency against throughput.

- ``policy_timelines(results)``: one panel per policy; a row per request, a bar per step it ran in
  (prefill dark, decode light) and a dot at its arrival, so idle places and waiting show at a glance.
- ``latency_vs_throughput(series)``: one line per policy through (throughput, latency) points;
  ``latency_vs_throughput_in_steps_and_seconds`` draws the same runs counted in engine steps and in seconds.

Both return a ``matplotlib.figure.Figure`` and use no global pyplot state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from course_lib.sim.batching import SimResult

__all__ = ["latency_vs_throughput", "latency_vs_throughput_in_steps_and_seconds", "policy_timelines", "step_figure",
           "timeline_stepper"]

PREFILL_COLOR = "#1f4e79"
DECODE_COLOR = "#8fb8de"
ARRIVAL_COLOR = "#c0392b"


def policy_timelines(results: Mapping[str, SimResult], *, max_requests: int = 24,
                     time_limit_s: float | None = None) -> Figure:
    """One timeline per policy: requests on the y axis, seconds on the x axis.

    results: {policy name: SimResult of the same workload}. max_requests: draw only the first
    requests (by id) so the rows stay readable. time_limit_s: cut the x axis (default: the latest finish).
    """
    if not results:
        raise ValueError("results must hold at least one policy's SimResult")
    if max_requests < 1:
        raise ValueError(f"max_requests must be >= 1, got {max_requests}")
    figure = Figure(figsize=(10, 2.2 + 1.6 * len(results)), layout="constrained")
    axes = figure.subplots(len(results), 1, sharex=True, squeeze=False)[:, 0]
    latest = max(step.end for result in results.values() for step in result.steps)
    for ax, (name, result) in zip(axes, results.items()):
        shown = {trace.request_id for trace in result.traces[:max_requests]}
        for request_id, (prefill, decode) in _bars_per_request(result, shown).items():
            ax.broken_barh(prefill, (request_id - 0.4, 0.8), facecolors=PREFILL_COLOR, edgecolors="none")
            ax.broken_barh(decode, (request_id - 0.4, 0.8), facecolors=DECODE_COLOR, edgecolors="none")
        for trace in result.traces[:max_requests]:
            ax.plot(trace.arrival_time, trace.request_id, marker="o", markersize=3, color=ARRIVAL_COLOR,
                    linestyle="none")
        ax.set_ylabel("request id")
        ax.set_ylim(max(shown) + 0.8, min(shown) - 0.8)
        busiest = max((step.batch_size for step in result.steps), default=0)
        ax.set_title(f"{name}: {len(result.steps)} steps, at most {busiest} of the {result.max_batch_size} places "
                     "used in a step", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlim(0, time_limit_s or latest)
    axes[-1].set_xlabel("time (s)")
    figure.legend(handles=[Patch(color=PREFILL_COLOR, label="prefill (first token)"),
                           Patch(color=DECODE_COLOR, label="decode (one token)"),
                           Patch(color=ARRIVAL_COLOR, label="arrival")],
                  loc="outside lower center", fontsize=8, ncols=3)
    figure.suptitle("Which request runs in which step")
    return figure


def _bars_per_request(result: SimResult, shown: set[int]) -> dict[int, tuple[list, list]]:
    """{request_id: (prefill bars, decode bars)} as (start, width) pairs; back-to-back decode steps
    merge into one bar, so a figure has a few artists per request rather than one per step."""
    bars: dict[int, tuple[list, list]] = {request_id: ([], []) for request_id in shown}
    for step in result.steps:
        for request_id in step.prefill_ids:
            if request_id in shown:
                bars[request_id][0].append((step.start, step.end - step.start))
        for request_id in step.decode_ids:
            if request_id not in shown:
                continue
            decode = bars[request_id][1]
            if decode and abs(decode[-1][0] + decode[-1][1] - step.start) < 1e-12:
                start, _ = decode[-1]
                decode[-1] = (start, step.end - start)
            else:
                decode.append((step.start, step.end - step.start))
    return bars


def latency_vs_throughput(series: Mapping[str, Sequence[tuple[float, float, str]]], *,
                          latency_label: str = "p99 end-to-end latency (s)",
                          throughput_label: str = "output tokens/s",
                          title: str = "Latency against throughput") -> Figure:
    """Latency (y) against throughput (x), one line of labelled points per policy.

    series: {policy name: [(throughput, latency in seconds, point label), ...]}, joined in the order
    given (rising load or batch size); a point label such as "batch 4" is written next to its point
    ("" for none). Good policies sit low and to the right.
    """
    _require_points(series)
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    _draw_latency_vs_throughput(figure.subplots(), series, latency_label, throughput_label, title)
    return figure


def latency_vs_throughput_in_steps_and_seconds(
        in_steps: Mapping[str, Sequence[tuple[float, float, str]]],
        in_seconds: Mapping[str, Sequence[tuple[float, float, str]]], *,
        title: str = "Latency against throughput") -> Figure:
    """Two panels of ``latency_vs_throughput``: the same runs counted in engine steps (left) and on the wall clock.

    in_steps: {name: [(output tokens per step, median end-to-end latency in steps, label), ...]};
    in_seconds: the same runs in tokens/s and seconds. Steps are what the scheduler decides and are
    the same on every machine; seconds add what each step cost on this one, noise included.
    """
    _require_points(in_steps)
    _require_points(in_seconds)
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    _draw_latency_vs_throughput(left, in_steps, "median end-to-end latency (engine steps)",
                                "output tokens per engine step", "counted in engine steps (any machine)")
    _draw_latency_vs_throughput(right, in_seconds, "median end-to-end latency (s)", "output tokens/s",
                                "on the wall clock (this machine, this run)")
    figure.suptitle(title)
    return figure


def _require_points(series: Mapping[str, Sequence[tuple[float, float, str]]]) -> None:
    if not series:
        raise ValueError("series must hold at least one policy")
    for name, points in series.items():
        if not points:
            raise ValueError(f"series[{name!r}] has no points")


def _draw_latency_vs_throughput(ax, series, latency_label: str, throughput_label: str, title: str) -> None:
    for name, points in series.items():
        xs = [point[0] for point in points]
        ys = [point[1] for point in points]
        (line,) = ax.plot(xs, ys, marker="o", label=name)
        for x, y, label in points:
            if label:
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8,
                            color=line.get_color())
    ax.set_xlabel(throughput_label)
    ax.set_ylabel(latency_label)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def step_figure(result: SimResult, step: int, *, title: str = "", max_requests: int = 16) -> Figure:
    """Every request up to the end of one step: waiting (light), running (dark); "now" as a line."""
    step = max(0, min(step, len(result.steps) - 1))
    now = result.steps[step].end
    figure = Figure(figsize=(9, 0.28 * min(len(result.traces), max_requests) + 1.6), layout="constrained")
    axes = figure.subplots()
    for row, trace in enumerate(result.traces[:max_requests]):
        if trace.arrival_time > now:
            continue
        started = trace.first_scheduled_time if trace.first_scheduled_time is not None else now
        axes.barh(row, min(started, now) - trace.arrival_time, left=trace.arrival_time, color=DECODE_COLOR,
                  alpha=0.5, label="waiting" if row == 0 else None)
        if started < now:
            finished = trace.token_times[-1] if trace.token_times else now
            axes.barh(row, min(finished, now) - started, left=started, color=PREFILL_COLOR,
                      label="in the batch" if row == 0 else None)
    axes.axvline(now, color=ARRIVAL_COLOR, linewidth=1)
    record = result.steps[step]
    axes.set(xlabel="time (s)", ylabel="request", ylim=(min(len(result.traces), max_requests) - 0.5, -0.5),
             xlim=(0, max(t.token_times[-1] for t in result.traces if t.token_times) * 1.02))
    axes.set_title(f"{title}step {step}: {len(record.prefill_ids)} prefills, {len(record.decode_ids)} decodes "
                   f"(batch {record.batch_size} of {result.max_batch_size})", fontsize=10)
    axes.legend(fontsize=8, loc="lower right")
    return figure


def timeline_stepper(results: Mapping[str, SimResult]):
    """A policy dropdown and a step slider: who waits and who runs at every step of each simulation."""
    from course_lib.viz.widgets import FigureExplorer, choice, int_slider

    names = list(results)
    most_steps = max(len(result.steps) for result in results.values())
    return FigureExplorer(lambda policy, step: step_figure(results[policy], step, title=f"{policy}: "), {
        "policy": choice("policy", names, names[0]),
        "step": int_slider("step", 0, most_steps - 1, min(10, most_steps - 1)),
    }, name="scheduler timeline")
