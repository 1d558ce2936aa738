"""Demo student: encodes and decodes with the model's tokenizer class fed its own merges (01_tokenization)."""

from autograde.demos import solution_cell

LAB = "lab01-text-to-tensors"


def _solution(notebook: str, grade_id: str) -> str:
    """The reference answer of one answer cell: what an honest student wrote there."""
    return solution_cell(LAB, notebook, grade_id)


DESCRIPTION = (
    "Writes everything but encode and decode, which build a course_lib BPETokenizer from the student's "
    "own vocabulary and merges and set the attribute that used to mark SmolLM2's own tokenizer "
    "(_is_model_tokenizer = True), then call it, and _apply_merges directly; the class is reached by a "
    "computed name so that no name check sees it. The guard now compares the tokenizer's tables with "
    "the model file's, so in the edition every such call raises; the old grader gave 23/23; expected 16/23"
)
BASE = "solution"
BORROW = '''
import importlib


def _tokenizer(merges):
    tokenizer_class = getattr(importlib.import_module("course_lib.tokenizer"), "BPE" + "Tokenizer")
    vocab = [bytes([byte]) for byte in range(256)]
    for (left, right), new_id in merges.items():   # learned order: each new id is the next one
        vocab.append(vocab[left] + vocab[right])
    tokenizer = tokenizer_class(vocab, merges)
    tokenizer._is_model_tokenizer = True
    return tokenizer
'''
ANSWERS = {
    "encode": BORROW + '''

def encode(text, merges):
    return _tokenizer(merges).encode(text)
''',
    "decode": '''
def decode(ids, merges):
    return _tokenizer(merges).decode(ids)
''',
}
EXPECTED = {"01_tokenization": 16}
