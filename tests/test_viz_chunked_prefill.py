"""course_lib.viz.chunked_prefill: each plot returns a Figure with labelled axes; bad input is named."""

import pytest
from matplotlib.figure import Figure

from course_lib.viz.chunked_prefill import batch_composition, token_gaps


def _labelled(fig):
    assert isinstance(fig, Figure)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_batch_composition():
    batches = [[("d0", 1), ("A", 10), ("B", 5)], [("d0", 1), ("B", 15)]]
    _labelled(batch_composition(batches, [["d0"], ["d0"]], 16))
    with pytest.raises(ValueError, match="one entry per step"):
        batch_composition(batches, [["d0"]], 16)


def test_token_gaps():
    figure = token_gaps({"whole": [10.0, 12.0, 300.0], "chunked": [10.0, 40.0, 45.0]})
    _labelled(figure)
    tail = figure.axes[1]
    assert [label.get_text() for label in tail.get_xticklabels()] == ["median", "p90", "worst"]
    assert "3 gaps" in tail.get_xlabel()
    with pytest.raises(ValueError, match="non-empty"):
        token_gaps({"whole": []})
