"""Demo student: prompt lookup continues the first occurrence of the ending, not the most recent."""

DESCRIPTION = (
    "ngram_draft scans from the start of the text and continues the FIRST earlier occurrence of the "
    "ending: right when the ending occurred once, wrong when it recurs. Loses both ngram_draft "
    "cells, expected 3/7"
)
BASE = "solution"
ANSWERS = {
    "ngram_draft": '''
def ngram_draft(token_ids, num_draft_tokens, max_ngram=3, min_ngram=1):
    """Prompt lookup."""
    if num_draft_tokens == 0:
        return []
    for n in range(min(max_ngram, len(token_ids) - 1), min_ngram - 1, -1):
        ending = token_ids[-n:]
        for start in range(0, len(token_ids) - n):
            if token_ids[start : start + n] == ending:
                return list(token_ids[start + n : start + n + num_draft_tokens])
    return []
''',
}
EXPECTED = {"04_drafts": 3}
