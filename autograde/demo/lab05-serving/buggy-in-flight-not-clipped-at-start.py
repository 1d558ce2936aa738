"""Demo student: mean_in_flight clips each request at the window's end but not at its start."""

DESCRIPTION = (
    "mean_in_flight adds min(done_at, end) - sent_at for each request, so a request sent before the window opened "
    "counts the time before start too. The visible test includes the worked example over [1, 5]: loses the "
    "mean_in_flight cell (2 points), with a hint to clip sent_at; poisson_arrival_times and open_loop keep theirs: "
    "expected 5/7"
)
BASE = "solution"
ANSWERS = {
    "mean_in_flight": '''
def mean_in_flight(records, start, end):
    """Time-average number of requests in flight over [start, end] (L in Little's law)."""
    if not end > start:
        raise ValueError(f"end must be > start, got start={start}, end={end}")
    busy = sum(max(0.0, min(r["done_at"], end) - r["sent_at"]) for r in records)
    return busy / (end - start)
''',
}
EXPECTED = {"02_load": 5}
