"""Demo student: decode turns each token into text on its own."""

DESCRIPTION = (
    "decode decodes every token's bytes separately, so characters split across tokens become '\\ufffd' "
    "and a cut-off character gives one '\\ufffd' per byte: loses both decode cells, expected 20/23"
)
BASE = "solution"
ANSWERS = {
    "decode": '''
def decode(ids, merges):
    """The text that token `ids` stand for."""
    vocab = build_vocab(merges)
    return "".join(vocab[token_id].decode("utf-8", errors="replace") for token_id in ids)
''',
}
EXPECTED = {"01_tokenization": 20}
