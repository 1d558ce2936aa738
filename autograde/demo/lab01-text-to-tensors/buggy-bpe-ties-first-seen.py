"""Demo student: BPE breaks ties by the pair seen first, not by the smallest pair."""

DESCRIPTION = (
    "train_bpe takes the most frequent pair with max(counts, key=counts.get), so among equally frequent pairs it "
    "takes the one seen first in the text, not the smallest (left, right) the chapter's tie rule asks for: the "
    "worked example's second merge already differs (Za before ab). In the kit the visible test says which merge "
    "differs, that it is a tie, and which pair wins it: loses both train_bpe cells (5 points), expected 18/23"
)
BASE = "solution"
ANSWERS = {
    "train_bpe": '''
def train_bpe(text, vocab_size):
    """Learn byte-level BPE merges from `text` until the vocabulary has `vocab_size` ids."""
    words = [list(word.encode("utf-8")) for word in pretokenize(text)]
    merges = {}
    for new_id in range(256, vocab_size):
        counts = {}
        for word in words:
            for pair, count in get_pair_counts(word).items():
                counts[pair] = counts.get(pair, 0) + count
        if not counts:
            break
        best = max(counts, key=counts.get)
        merges[best] = new_id
        words = [merge_pair(word, best, new_id) for word in words]
    return merges
''',
}
EXPECTED = {"01_tokenization": 18}
