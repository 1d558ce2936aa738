"""Demo student: raises its own NeedsGPU to turn failures into skips (01_tokenization)."""

DESCRIPTION = (
    "Defines an exception class named NeedsGPU and raises it from every answer, hoping the grader "
    "reports 'skipped: needs a GPU' and drops the cells from max_score. The grader decides what "
    "needs a GPU from the notebook's metadata alone, so these are errors: 0 points, and the "
    "notebook's max_score stays whole; expected 0/23"
)
BASE = "release"
_RAISE = '''
class NeedsGPU(Exception):
    """Named like the course's own: not the same class."""


def {name}(*args, **kwargs):
    raise NeedsGPU("skipped: needs a GPU")
'''
ANSWERS = {name: _RAISE.format(name=name) for name in
           ["get_pair_counts", "merge_pair", "train_bpe", "encode", "build_vocab", "decode", "embed",
            "bytes_per_element", "embedding_bytes"]}
EXPECTED = {"01_tokenization": 0}
