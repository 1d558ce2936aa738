"""Demo student: TPOT divides the decode time by the number of tokens instead of the number of gaps."""

DESCRIPTION = (
    "compute_metrics divides (last token time - first token time) by n instead of n - 1 for TPOT: loses "
    "both compute_metrics cells (3 + 1 points), the policies and the percentile keep theirs: expected 9/13"
)
BASE = "solution"
ANSWERS = {
    "compute_metrics": '''
def compute_metrics(traces):
    """Latency statistics and throughput of a finished run."""
    def stats(values):
        return {"mean": sum(values) / len(values), "p50": percentile(values, 50), "p99": percentile(values, 99)}

    ttfts = [t.token_times[0] - t.arrival_time for t in traces]
    e2es = [t.token_times[-1] - t.arrival_time for t in traces]
    tpots = [(t.token_times[-1] - t.token_times[0]) / len(t.token_times)
             for t in traces if len(t.token_times) >= 2]
    duration = max(t.token_times[-1] for t in traces) - min(t.arrival_time for t in traces)
    return {
        "ttft": stats(ttfts),
        "tpot": stats(tpots) if tpots else None,
        "e2e": stats(e2es),
        "requests_per_s": len(traces) / duration,
        "output_tokens_per_s": sum(len(t.token_times) for t in traces) / duration,
    }
''',
}
EXPECTED = {"04_batching": 9}
