"""Demo student: the Poisson arrivals start with an arrival at time 0."""

DESCRIPTION = (
    "poisson_arrival_times appends the clock before drawing the first gap, so every run has an arrival at 0.0 "
    "and every later arrival is one gap early; counts and gaps still look Poisson, but the first arrival is not "
    "the first gap after 0: loses the arrivals cell (2 points); open_loop and mean_in_flight keep theirs: "
    "expected 5/7"
)
BASE = "solution"
ANSWERS = {
    "poisson_arrival_times": '''
import random


def poisson_arrival_times(rate_per_s, duration_s, seed):
    """Arrival times of a Poisson process: increasing floats in [0, duration_s)."""
    if not rate_per_s > 0 or not duration_s > 0:
        raise ValueError(f"rate_per_s and duration_s must be > 0, got {rate_per_s} and {duration_s}")
    rng = random.Random(seed)
    times, clock = [], 0.0
    while clock < duration_s:
        times.append(clock)
        clock += rng.expovariate(rate_per_s)
    return times
''',
}
EXPECTED = {"02_load": 5}
