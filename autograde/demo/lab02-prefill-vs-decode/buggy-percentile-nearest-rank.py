"""Demo student: the percentile picks the element at index q / 100 * n, without interpolation."""

DESCRIPTION = (
    "percentile returns sorted(values)[int(q / 100 * n)] (a nearest-rank rule, clipped to the last index) "
    "instead of interpolating at rank (n - 1) * q / 100: loses the percentile cell (2) and, since "
    "compute_metrics calls it, both compute_metrics cells (3 + 1): expected 7/13"
)
BASE = "solution"
ANSWERS = {
    "percentile": '''
def percentile(values, q):
    """The q-th percentile of values."""
    ordered = sorted(values)
    index = min(int(q / 100 * len(ordered)), len(ordered) - 1)
    return ordered[index]
''',
}
EXPECTED = {"04_batching": 7}
