"""course_lib.viz.prefix_caching: the plot returns a Figure with labelled axes; bad input is named."""

import pytest
from matplotlib.figure import Figure

from course_lib.viz.prefix_caching import prefix_cache_savings


def test_prefix_cache_savings():
    fig = prefix_cache_savings({"off": [100.0, 120.0], "on": [20.0, 25.0]}, {"off": 30, "on": 16}, 16)
    assert isinstance(fig, Figure)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    with pytest.raises(ValueError, match="same policies"):
        prefix_cache_savings({"off": [1.0]}, {"on": 3}, 16)
