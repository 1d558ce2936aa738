"""Demo student: fastest returns infinity for repeats < 1 instead of raising ValueError."""

DESCRIPTION = (
    "fastest keeps the fastest of the runs, but with repeats = 0 it runs nothing and returns float('inf') "
    "instead of raising the ValueError its docstring promises; the visible repeats = 0 case says so: loses "
    "test_fastest (2 points), expected 9/11"
)
BASE = "solution"
ANSWERS = {
    "fastest": '''
def fastest(function, repeats):
    """The shortest wall-clock time of `repeats` calls of `function()`, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best
''',
}
EXPECTED = {"01_autoregression": 9}
