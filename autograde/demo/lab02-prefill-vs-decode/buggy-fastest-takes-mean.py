"""Demo student: fastest returns the mean of the runs, not the fastest."""

DESCRIPTION = (
    "fastest times each call and returns the average: on a shared machine the noise only adds time, so the "
    "mean overstates the work. The check lends a function whose calls take known, different times and times "
    "them on its side: loses test_fastest (2 points); time_step, built on it, still returns a time inside "
    "the range of the steps it ran: expected 9/11"
)
BASE = "solution"
ANSWERS = {
    "fastest": '''
def fastest(function, repeats):
    """The average wall-clock time of `repeats` calls of `function()`, in seconds."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    total = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        total += time.perf_counter() - start
    return total / repeats
''',
}
EXPECTED = {"01_autoregression": 9}
