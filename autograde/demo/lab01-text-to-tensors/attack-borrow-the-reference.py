"""Demo student: borrows the course's own answers in every form the old grader missed (01_tokenization)."""

DESCRIPTION = (
    "Hands in the library's answers instead of writing them: train_bpe through a module attribute, "
    "encode as functools.partial, decode through a helper one call deeper, build_vocab as the checks' "
    "reference_vocab alias, get_pair_counts as an object that forwards with __getattr__. The kernel "
    "imports the student edition, where each of those is a stub naming the exercise, so every borrowed "
    "answer fails; the honest answers (merge_pair, embed, the memory exercises) keep their points; expected 9/23"
)
BASE = "solution"
ANSWERS = {
    "get_pair_counts": '''
from course_lib import tokenizer as library


class ForwardToLibrary:
    """Looks like get_pair_counts; every attribute and call goes to the library."""

    def __getattr__(self, name):
        return getattr(library, name)

    def __call__(self, ids):
        return self.get_pair_counts(ids)


get_pair_counts = ForwardToLibrary()
''',
    "train_bpe": '''
import course_lib.tokenizer


def train_bpe(text, vocab_size):
    return course_lib.tokenizer.train_bpe(text, vocab_size)
''',
    "encode": '''
import functools

from course_lib import tokenizer

encode = functools.partial(tokenizer.encode_with_merges)
''',
    "build_vocab": '''
from course_lib.checks.tokenization import reference_vocab as build_vocab
''',
    "decode": '''
from course_lib import tokenizer


def _join_tokens(ids, merges):
    return tokenizer.decode_with_merges(ids, merges)


def decode(ids, merges):
    return _join_tokens(ids, merges)
''',
}
EXPECTED = {"01_tokenization": 9}
