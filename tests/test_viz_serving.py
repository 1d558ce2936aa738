"""Lab 0.5's figures render with what they promise: labelled knee and capacity lines, latency in seconds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from course_lib.loadtest import Slo  # noqa: E402
from course_lib.viz import serving as viz  # noqa: E402


def summary(rate: float, ttft: float) -> dict:
    stats = {"mean": ttft, "p50": ttft, "p90": 2 * ttft, "p99": 3 * ttft}
    return {"ttft": stats, "e2e": {k: v + 0.5 for k, v in stats.items()}, "requests_per_s": min(rate, 10.0),
            "goodput_per_s": min(rate, 10.0) * (1.0 if ttft < 1 else 0.2)}


def test_latency_vs_load_labels_the_knee_the_capacity_and_seconds():
    import matplotlib.pyplot as plt

    points = [(2.5, summary(2.5, 0.1)), (5.0, summary(5.0, 0.12)), (9.0, summary(9.0, 0.3)),
              (12.5, summary(12.5, 2.0)), (20.0, summary(20.0, 8.0))]
    figure = viz.latency_vs_load(points, slo=Slo(ttft_s=1.0, tpot_s=0.5), knee=9.0, capacity=10.0)
    figure.canvas.draw()
    latency_axis, throughput_axis = figure.axes
    for axis in (latency_axis, throughput_axis):
        labels = [text.get_text() for text in axis.get_legend().get_texts()]
        assert any(label.startswith("knee = 9/s") for label in labels)
        assert any(label.startswith("capacity") for label in labels)
    assert "TTFT p90" in [t.get_text() for t in latency_axis.get_legend().get_texts()]
    ticks = [label.get_text() for label in latency_axis.get_yticklabels() if label.get_text()]
    assert ticks and all(tick.endswith(" s") and "^" not in tick for tick in ticks)
    plt.close(figure)


def test_latency_vs_load_refuses_an_unknown_percentile():
    with pytest.raises(ValueError, match="p90"):
        viz.latency_vs_load([(1.0, summary(1.0, 0.1))], high="p95")


def test_policy_bars_draws_one_panel_per_metric():
    import matplotlib.pyplot as plt

    figure = viz.policy_bars({"a": {"x": 1.0, "y": 2.0}, "b": {"x": 3.0, "y": 1.0}}, title="t")
    assert len(figure.axes) == 2 and figure.axes[0].get_title() == "x"
    plt.close(figure)
