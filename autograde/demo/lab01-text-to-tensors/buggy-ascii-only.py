"""Demo student: uses ord() of each character instead of the UTF-8 bytes."""

DESCRIPTION = (
    "train_bpe and encode start from [ord(c) for c in word] instead of the UTF-8 bytes: right on ASCII, "
    "so every visible test passes, but the hidden non-ASCII inputs fail both hidden cells: expected 18/23"
)
BASE = "solution"
ANSWERS = {
    "train_bpe": '''
def train_bpe(text, vocab_size):
    """Learn byte-level BPE merges from `text` until the vocabulary has `vocab_size` ids."""
    words = [[ord(character) for character in word] for word in pretokenize(text)]
    merges = {}
    for new_id in range(256, vocab_size):
        counts = {}
        for word in words:
            for pair, count in get_pair_counts(word).items():
                counts[pair] = counts.get(pair, 0) + count
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges[best] = new_id
        words = [merge_pair(word, best, new_id) for word in words]
    return merges
''',
    "encode": '''
def encode(text, merges):
    """Token ids of `text` under the learned `merges`."""
    ids = []
    for word in pretokenize(text):
        word_ids = [ord(character) for character in word]
        while len(word_ids) >= 2:
            pairs = get_pair_counts(word_ids)
            first_learned = min(pairs, key=lambda pair: merges.get(pair, float("inf")))
            if first_learned not in merges:
                break
            word_ids = merge_pair(word_ids, first_learned, merges[first_learned])
        ids.extend(word_ids)
    return ids
''',
}
EXPECTED = {"01_tokenization": 18}
