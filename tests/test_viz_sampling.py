"""course_lib.viz.sampling: the filter-stage plot has labelled axes, one panel per stage, greyed filtered bars."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_lib.sampling import top_k_filter  # noqa: E402
from course_lib.viz.sampling import plot_filter_stages, token_label  # noqa: E402


def test_plot_filter_stages_labels_every_panel():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    stages = [("raw", logits), ("top-k 2", top_k_filter(logits[None], 2)[0])]
    figure = plot_filter_stages(stages, lambda token_id: f"t{token_id}", top_n=4)
    try:
        assert isinstance(figure, Figure)
        axes = figure.axes
        assert len(axes) == 2
        assert all(axis.get_ylabel() == "probability" for axis in axes)
        assert "most likely" in axes[-1].get_xlabel()
        assert [label.get_text() for label in axes[-1].get_xticklabels()] == ["t0", "t1", "t2", "t3"]
        assert axes[0].get_title(loc="left").startswith("raw: 6 tokens")
        assert axes[1].get_title(loc="left").startswith("top-k 2: 2 tokens")
        heights = [bar.get_height() for bar in axes[1].patches]
        assert heights[2:] == [0.0, 0.0] and sum(heights) == pytest.approx(1.0)
        crosses = axes[1].lines[0].get_xdata()
        assert list(crosses) == [2, 3] and not axes[0].lines  # filtered tokens marked, none in the raw panel
    finally:
        plt.close(figure)


def test_plot_filter_stages_rejects_bad_arguments():
    with pytest.raises(ValueError, match="stages"):
        plot_filter_stages([], str)
    with pytest.raises(ValueError, match="top_n"):
        plot_filter_stages([("raw", torch.zeros(3))], str, top_n=0)


def test_token_label_shows_spaces_and_newlines():
    pieces = {1: b" the", 2: b"\n", 3: b""}
    assert token_label(pieces.get, 1) == "\u2423the"
    assert token_label(pieces.get, 2) == "\\n"
    assert token_label(pieces.get, 3) == "<3>"
