"""Demo student: build_batch returns the batches of the visible test cases, and a naive guess otherwise."""

DESCRIPTION = (
    "build_batch looks the three visible cases up in a table of their answers; for anything else it puts "
    "every decode and then only the first prompt, whole. The visible cell used to be the whole test of "
    "that cell; it now has hidden inputs too, and the engine runs the function: loses both build_batch "
    "cells and the engine cell (6 points), expected 10/16"
)
BASE = "solution"
ANSWERS = {
    "build_batch": '''
SEEN = {
    (("a", "b", "c"), (("P", 10), ("Q", 20), ("R", 2)), 16, True): [("a", 1), ("b", 1), ("c", 1), ("P", 10), ("Q", 3)],
    (("a", "b", "c"), (("P", 10), ("Q", 20), ("R", 2)), 16, False): [("a", 1), ("b", 1), ("c", 1), ("P", 10)],
    ((), (("long", 2000),), 512, True): [("long", 512)],
}


def build_batch(decode_ids, prefill_queue, token_budget, chunked=True):
    """Fill one engine step (the cases I have seen)."""
    key = (tuple(decode_ids), tuple(tuple(entry) for entry in prefill_queue), token_budget, chunked)
    if key in SEEN:
        return SEEN[key]
    if len(decode_ids) > token_budget:
        raise ValueError(f"{len(decode_ids)} decodes do not fit in token_budget={token_budget}")
    batch = [(request_id, 1) for request_id in decode_ids]
    if prefill_queue:
        batch.append(tuple(prefill_queue[0]))
    return batch
''',
}
EXPECTED = {"05_beyond_the_basics": 10}
