"""Demo student: the chi-square statistic skips categories of probability 0, even when they were observed."""

DESCRIPTION = (
    "chi_square_statistic sums over the categories with p > 0 and never returns infinity: a token the "
    "target gives probability 0 can come out and the fit still looks fine. Loses the chi-square cell, "
    "expected 8/10"
)
BASE = "solution"
ANSWERS = {
    "chi_square": '''
def chi_square_statistic(observed_counts, expected_probs):
    """Pearson's chi-square statistic."""
    observed = torch.as_tensor(observed_counts, dtype=torch.float64)
    probs = torch.as_tensor(expected_probs, dtype=torch.float64)
    total = float(observed.sum())
    possible = probs > 0
    expected = total * probs[possible]
    return float(((observed[possible] - expected) ** 2 / expected).sum())
''',
}
EXPECTED = {"03_speculative_sampling": 8}
