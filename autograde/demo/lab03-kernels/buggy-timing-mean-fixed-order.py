"""Demo student: paired timing by the mean, always A first (05_into_the_engine)."""

DESCRIPTION = (
    'time_paired times the pairs always in the order A then B (B always runs on the warmer, more drifted '
    "device) and returns the mean of each function's times (one disturbed call moves it). Chapter 4 "
    'handed in as the reference, full marks. Loses both time_paired cells, expected 6/10'
)
BASE = "solution"
ANSWERS = {
    '05_into_the_engine/time_paired': '''
def time_paired(run_a, run_b, repeats=20, *, warmup=2, clock=time.perf_counter, synchronize=None):
    """Median seconds of one call of run_a and of run_b, measured in alternation.

    Args:
        run_a, run_b: functions of no argument.
        repeats: int >= 1, timed calls of each.
        warmup: int >= 0, untimed calls of each first.
        clock: function returning the time in seconds.
        synchronize: function that waits for all queued device work, or None (nothing to wait for).
    Returns:
        (median_seconds_a, median_seconds_b). Pair i runs A then B for even i, B then A for odd i;
        each call is timed alone: synchronize, read the clock, call, synchronize, read the clock.
    """
    wait = synchronize if synchronize is not None else (lambda: None)

    def timed(run):
        wait()
        start = clock()
        run()
        wait()
        return clock() - start

    for _ in range(warmup):
        run_a()
        run_b()
    times_a, times_b = [], []
    for pair in range(repeats):
        times_a.append(timed(run_a))
        times_b.append(timed(run_b))
    return statistics.mean(times_a), statistics.mean(times_b)
''',
}
EXPECTED = {'04_split_kv': 18, '05_into_the_engine': 6}
