"""Demo student: the trainer numbers its merges from 257."""

DESCRIPTION = (
    "train_bpe gives the first merge id 257 instead of 256 (and stops one merge early): loses both "
    "train_bpe cells, nothing else, because the other tests bring their own merges: expected 18/23"
)
BASE = "solution"
ANSWERS = {
    "train_bpe": '''
def train_bpe(text, vocab_size):
    """Learn byte-level BPE merges from `text` until the vocabulary has `vocab_size` ids."""
    words = [list(word.encode("utf-8")) for word in pretokenize(text)]
    merges = {}
    while 256 + len(merges) + 1 < vocab_size:
        counts = {}
        for word in words:
            for pair, count in get_pair_counts(word).items():
                counts[pair] = counts.get(pair, 0) + count
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        new_id = 256 + len(merges) + 1
        merges[best] = new_id
        words = [merge_pair(word, best, new_id) for word in words]
    return merges
''',
}
EXPECTED = {"01_tokenization": 18}
