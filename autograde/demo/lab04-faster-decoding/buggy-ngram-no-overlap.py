"""Demo student: prompt lookup skips earlier occurrences that overlap the ending."""

DESCRIPTION = (
    "ngram_draft only looks at occurrences that end before the ending starts (start + n <= len - n), "
    "though the rule allows an occurrence to overlap the ending: in a run of repeated tokens or a "
    "repeating phrase it continues an older occurrence. Loses both ngram_draft cells, expected 3/7"
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
        for start in range(len(token_ids) - 2 * n, -1, -1):
            if token_ids[start : start + n] == ending:
                return list(token_ids[start + n : start + n + num_draft_tokens])
    return []
''',
}
EXPECTED = {"04_drafts": 3}
