"""course_lib.viz.disaggregation: the plot returns a Figure with labelled axes; bad input is named."""

import pytest
from matplotlib.figure import Figure

from course_lib.sim.disaggregation import make_workload, simulate_colocated, simulate_disaggregated
from course_lib.viz.disaggregation import latency_distributions


def test_latency_distributions():
    workload = make_workload(40, seed=2)
    fig = latency_distributions([simulate_colocated(workload), simulate_disaggregated(workload, transfer_ms=3.0)])
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    with pytest.raises(ValueError, match="SimResult"):
        latency_distributions([])
