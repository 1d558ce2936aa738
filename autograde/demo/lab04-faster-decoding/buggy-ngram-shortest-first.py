"""Demo student: prompt lookup tries the shortest ending first (a 1-gram match wins over a 3-gram one)."""

DESCRIPTION = (
    "ngram_draft loops n from min_ngram UP to max_ngram, so a single recurring token decides the drafts "
    "even where the last three tokens recur: right whenever the shortest match continues like the longest "
    "(both worked examples), wrong otherwise. Loses both ngram_draft cells, expected 3/7"
)
BASE = "solution"
ANSWERS = {
    "ngram_draft": '''
def ngram_draft(token_ids, num_draft_tokens, max_ngram=3, min_ngram=1):
    """Prompt lookup."""
    if num_draft_tokens == 0:
        return []
    for n in range(min_ngram, min(max_ngram, len(token_ids) - 1) + 1):
        ending = token_ids[-n:]
        for start in range(len(token_ids) - n - 1, -1, -1):
            if token_ids[start : start + n] == ending:
                return list(token_ids[start + n : start + n + num_draft_tokens])
    return []
''',
}
EXPECTED = {"04_drafts": 3}
