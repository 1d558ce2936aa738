"""Demo student: merge_pair forgets to skip past a replaced pair."""

DESCRIPTION = (
    "merge_pair does not jump past a replaced pair, so overlapping occurrences ('aaa') are merged twice; "
    "train_bpe and encode build on it and fail too: expected 11/23"
)
BASE = "solution"
ANSWERS = {
    "merge_pair": '''
def merge_pair(ids, pair, new_id):
    """Replace every occurrence of `pair` in `ids` by `new_id`, scanning from the left."""
    merged = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            merged.append(new_id)
        else:
            merged.append(ids[i])
        i += 1
    return merged
''',
}
EXPECTED = {"01_tokenization": 11}
