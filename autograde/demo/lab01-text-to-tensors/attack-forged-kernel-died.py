"""Demo student: carries hidden inputs out in an error dressed as the grader's KernelDied (01_tokenization)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"
NOTEBOOK = "01_tokenization"


def _solution(grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, NOTEBOOK, grade_id)


DESCRIPTION = (
    "Answers honestly, but train_bpe and encode keep the text of every call (the hidden checks' training texts "
    "and inputs among them), and embedding_bytes, called directly by its test cell after the hidden checks have "
    "run, raises an exception class that sets __module__ = 'course_lib' and __qualname__ = "
    "'runner.student.KernelDied', its message shaped like the grader's own 'limit of X files in the scratch "
    "folder reached' with the kept texts as X. The old grader rebuilt it as its own KernelDied, trusted it, and "
    "kept X in the feedback. Every error from the kernel is now the student's, named as it claims and withheld "
    "like any other after the hidden checks; the grader knows its own deaths by its own record. "
    "test_embedding_bytes is lost; expected 21/23"
)
BASE = "solution"
FIRST = '''

_kept = []


def _keep(name, function):
    """Every call's arguments, as text (the hidden checks' inputs among them)."""

    def kept(*args, **kwargs):
        text = repr(args)[:160]
        if text not in _kept:
            _kept.append(text)
        return function(*args, **kwargs)

    return kept
'''
KEEP = '''

{name} = _keep("{name}", {name})
'''
FORGE = '''

_calls = []
_honest_embedding_bytes = embedding_bytes


class _Forged(Exception):
    pass


_Forged.__module__ = "course_lib"
_Forged.__qualname__ = "runner.student.KernelDied"
_Forged.__name__ = "KernelDied"


def embedding_bytes(vocab_size, d_model, bytes_per_element):
    _calls.append(1)
    if len(_calls) == 3:   # the test cell's own direct call, after the checks' two
        raise _Forged("limit of " + " | ".join(_kept) + " files in the scratch folder reached")
    return _honest_embedding_bytes(vocab_size, d_model, bytes_per_element)
'''
ANSWERS = {
    "get_pair_counts": _solution("get_pair_counts") + FIRST,
    "train_bpe": _solution("train_bpe") + KEEP.format(name="train_bpe"),
    "encode": _solution("encode") + KEEP.format(name="encode"),
    "embedding_bytes": _solution("embedding_bytes") + FORGE,
}
EXPECTED = {NOTEBOOK: 21}
