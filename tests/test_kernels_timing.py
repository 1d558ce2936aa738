"""course_lib.kernels.timing: time_paired alternates, warms up, synchronizes and takes medians (on a
fake clock), copy_bandwidth measures something plausible, and both reject bad arguments."""

from __future__ import annotations

import pytest

from course_lib.kernels.timing import copy_bandwidth, median, time_paired


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.log = []

    def __call__(self):
        return self.now

    def runner(self, name, costs):
        def run():
            self.log.append(name)
            self.now += costs.pop(0) if isinstance(costs, list) else costs
        return run


def test_time_paired_alternates_and_returns_medians():
    clock = FakeClock()
    costs_a = [100.0, 100.0] + [2.0, 2.0, 50.0, 2.0, 2.0]   # two warm-up calls, then one outlier
    a = clock.runner("a", costs_a)
    b = clock.runner("b", 1.0)
    seconds_a, seconds_b = time_paired(a, b, repeats=5, warmup=2, clock=clock)
    assert (seconds_a, seconds_b) == (2.0, 1.0)
    assert clock.log == ["a", "b", "a", "b", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]


def test_time_paired_synchronizes_around_every_timed_call():
    events = []
    time_paired(lambda: events.append("a"), lambda: events.append("b"), repeats=1, warmup=0,
                synchronize=lambda: events.append("sync"), clock=lambda: 0.0)
    assert events == ["sync", "a", "sync", "sync", "b", "sync"]


@pytest.mark.parametrize("kwargs, words", [({"repeats": 0}, "repeats"), ({"warmup": -1}, "warmup")])
def test_time_paired_rejects_bad_counts(kwargs, words):
    with pytest.raises(ValueError, match=words):
        time_paired(lambda: None, lambda: None, **kwargs)


def test_median_and_copy_bandwidth():
    assert median([3, 1, 2]) == 2 and median([4, 1, 2, 3]) == 2.5
    with pytest.raises(ValueError, match="empty"):
        median([])
    assert 1e8 < copy_bandwidth("cpu", 2**22, repeats=2) < 1e13
    with pytest.raises(ValueError, match="num_bytes"):
        copy_bandwidth("cpu", 10)
