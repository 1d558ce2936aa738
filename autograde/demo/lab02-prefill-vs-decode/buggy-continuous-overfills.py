"""Demo student: continuous batching admits a full batch's worth of requests every step."""

DESCRIPTION = (
    "continuous_batching admits up to max_batch_size waiting requests every step, forgetting the ones "
    "already running, so the batch overflows: loses the continuous-batching cell (2 points) only, since the "
    "priority policy is a separate answer: expected 11/13"
)
BASE = "solution"
ANSWERS = {
    "continuous_batching": '''
def continuous_batching(state):
    """Continuous batching: before every step, fill the batch, oldest first."""
    return list(state.waiting[: state.max_batch_size])
''',
}
EXPECTED = {"04_batching": 11}
