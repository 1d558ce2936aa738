"""Demo student: TPOT divides the decode time by every output token instead of the gaps after the first."""

DESCRIPTION = (
    "request_metrics divides (last chunk - first chunk) by num_output_tokens instead of num_output_tokens - 1: "
    "loses the request_metrics cell (2 points); parse_stream and histogram_quantile keep theirs: expected 5/7"
)
BASE = "solution"
ANSWERS = {
    "request_metrics": '''
def request_metrics(sent_at, parsed):
    """TTFT, TPOT and end-to-end latency (seconds) of one streamed request."""
    times, num_tokens = parsed["chunk_times"], parsed["num_output_tokens"]
    return {"ttft": times[0] - sent_at,
            "tpot": (times[-1] - times[0]) / num_tokens if num_tokens >= 2 else None,
            "e2e": times[-1] - sent_at}
''',
}
EXPECTED = {"01_metrics_from_the_wire": 5}
