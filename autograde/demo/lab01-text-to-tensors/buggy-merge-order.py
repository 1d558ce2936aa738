"""Demo student: encode merges the leftmost mergeable pair instead of the first-learned one."""

DESCRIPTION = (
    "encode applies the leftmost pair that has a merge instead of the one learned first (lowest id), "
    "so 'abc' with bc learned before ab gives [ab, c]: loses both encode cells, expected 19/23"
)
BASE = "solution"
ANSWERS = {
    "encode": '''
def encode(text, merges):
    """Token ids of `text` under the learned `merges`."""
    ids = []
    for word in pretokenize(text):
        word_ids = list(word.encode("utf-8"))
        merged_something = True
        while merged_something:
            merged_something = False
            for i in range(len(word_ids) - 1):
                pair = (word_ids[i], word_ids[i + 1])
                if pair in merges:
                    word_ids = merge_pair(word_ids, pair, merges[pair])
                    merged_something = True
                    break
        ids.extend(word_ids)
    return ids
''',
}
EXPECTED = {"01_tokenization": 19}
