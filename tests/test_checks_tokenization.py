"""The chapter-1 checks (course_lib.checks.tokenization) accept the reference answers and reject
each demo student's bug with feedback that names the mistake.

The answers come from the solution notebook's answer cells and the demo specs, defined with exec
in a fresh namespace (the notebook itself is not run), so these tests stay fast.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import nbformat
import pytest
import torch

from autograde.authoring import points_summary
from course_lib.checks import CheckFailed
from course_lib.checks import tokenization as checks
from course_lib.handin.notebooks import written_cells
from course_lib.tokenizer import pretokenize
from tests.notebook_answers import answer_sources

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab01-text-to-tensors" / "01_tokenization.ipynb"
DEMO_SPECS = ROOT / "autograde" / "demo" / "lab01-text-to-tensors"

CAT_TEXT = "the cat sat on the mat; the cat ate the rat"
MIXED_TEXT = "Straße, naïve café: 猫が好き 🙂🙂 ΔΔΔ " * 3


def _answer_sources() -> dict[str, str]:
    return answer_sources(SOLUTION)


def _student(replacements: dict[str, str] | None = None) -> dict:
    """The namespace a student's notebook would have: every answer cell run, some replaced."""
    namespace = {"__name__": "__main__", "pretokenize": pretokenize, "torch": torch}
    for grade_id, source in _answer_sources().items():
        exec(compile((replacements or {}).get(grade_id, source), f"<answer {grade_id}>", "exec"), namespace)
    return namespace


def _demo_answers(name: str) -> dict[str, str]:
    return runpy.run_path(str(DEMO_SPECS / f"{name}.py"))["ANSWERS"]


@pytest.fixture(scope="module")
def reference():
    return _student()


def test_reference_answers_pass_every_check(reference):
    cat_merges = checks.reference_merges(CAT_TEXT, 275)
    mixed_merges = checks.reference_merges(MIXED_TEXT, 300)
    for ids in ([], [42], [97, 97, 97], list("aaabdaaabac".encode()), checks.random_ids(seed=1, length=200)):
        checks.check_get_pair_counts(reference["get_pair_counts"], ids)
        if len(ids) >= 2:
            checks.check_merge_pair(reference["merge_pair"], ids, (ids[0], ids[1]), 256)
    for text, vocab_size in [("aaabdaaabac", 262), ("", 300), ("ab", 300), (CAT_TEXT, 275), (MIXED_TEXT, 290)]:
        checks.check_train_bpe(reference["train_bpe"], text, vocab_size)
    for text in ["", "abc", "the rat sat on the cat", MIXED_TEXT[::-1], checks.random_text(seed=2, num_words=30)]:
        checks.check_encode(reference["encode"], text, mixed_merges)
        checks.check_decode(reference["decode"], checks.reference_encode(text, cat_merges), cat_merges)
    checks.check_encode(reference["encode"], "abc", {(98, 99): 256, (97, 98): 257})
    checks.check_decode(reference["decode"], [0xE2, 0x9C], cat_merges)
    checks.check_build_vocab(reference["build_vocab"], mixed_merges)
    table = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    for ids in ([], [3, 3, 49], torch.tensor([0, 1, 2])):
        checks.check_embed(reference["embed"], ids, table)
    checks.check_embed(reference["embed"], [1, 2], table.to(torch.bfloat16))
    for precision in checks.BITS_PER_PRECISION:
        checks.check_bytes_per_element(reference["bytes_per_element"], precision)
    checks.check_embedding_bytes(reference["embedding_bytes"], 50_000, 4_096, 2)
    checks.check_embedding_bytes(reference["embedding_bytes"], 49_152, 576, 34 / 32)


def test_hand_example_matches_the_outline(reference):
    """The first merge on "aaabdaaabac" is "aa" (the outline's hand-checkable case)."""
    merges = reference["train_bpe"]("aaabdaaabac", 262)
    assert list(merges.items())[0] == ((97, 97), 256)
    assert merges == checks.reference_merges("aaabdaaabac", 262)
    assert reference["merge_pair"](list(b"aaabdaaabac"), (97, 97), 256) == [256, 97, 98, 100, 256, 97, 98, 97, 99]


def _failure(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as caught:
        check(*args, **kwargs)
    return str(caught.value)


def test_overlapping_merge_is_rejected_with_a_hint():
    buggy = _student(_demo_answers("buggy-overlapping-merge"))
    message = _failure(checks.check_merge_pair, buggy["merge_pair"], [97, 97, 97], (97, 97), 256)
    assert "expected: [256, 97]" in message and "got:      [256, 256, 97]" in message
    assert "continue at i + 2" in message
    # The trainer and encoder that build on it fail too (the score table's cascade).
    _failure(checks.check_train_bpe, buggy["train_bpe"], "aaabdaaabac", 262)
    _failure(checks.check_encode, buggy["encode"], "aaabdaaabac", checks.reference_merges("aaabdaaabac", 262))


def test_merge_order_bug_is_rejected_with_a_hint():
    buggy = _student(_demo_answers("buggy-merge-order"))
    message = _failure(checks.check_encode, buggy["encode"], "abc", {(98, 99): 256, (97, 98): 257})
    assert "lowest new id" in message
    assert "257" in message and "256" in message


def test_decode_per_token_is_rejected_with_a_hint():
    buggy = _student(_demo_answers("buggy-decode-per-token"))
    merges = checks.reference_merges(CAT_TEXT, 275)
    message = _failure(checks.check_decode, buggy["decode"], checks.reference_encode("the naïve cat ✓", merges), merges)
    assert "join the bytes of *all* tokens" in message
    message = _failure(checks.check_decode, buggy["decode"], [0xE2, 0x9C], merges)
    assert "more replacement characters" in message
    # ASCII-only text decodes fine token by token: the bug is invisible there.
    checks.check_decode(buggy["decode"], checks.reference_encode("the rat sat", merges), merges)


def test_off_by_one_id_is_rejected_with_a_hint():
    buggy = _student(_demo_answers("buggy-off-by-one-id"))
    message = _failure(checks.check_train_bpe, buggy["train_bpe"], "aaabdaaabac", 262)
    assert "expected: \"(97, 97) -> 256" in message and "got:      '(97, 97) -> 257'" in message
    assert "the first merge gets id 256" in message
    message = _failure(checks.check_train_bpe, buggy["train_bpe"], "aaabdaaabac", 257)
    assert "learned 0 merges; the reference learns 1" in message


def test_bits_instead_of_bytes_is_rejected_with_a_hint():
    buggy = _student(_demo_answers("buggy-bits-not-bytes"))
    message = _failure(checks.check_bytes_per_element, buggy["bytes_per_element"], "fp16")
    assert "expected: 2.0" in message and "got:      16.0" in message and "bits" in message


def test_ascii_only_passes_ascii_but_not_utf8():
    buggy = _student(_demo_answers("buggy-ascii-only"))
    checks.check_train_bpe(buggy["train_bpe"], CAT_TEXT, 275)
    checks.check_encode(buggy["encode"], "the rat sat on the cat", checks.reference_merges(CAT_TEXT, 275))
    message = _failure(checks.check_encode, buggy["encode"], "the café 猫", checks.reference_merges(CAT_TEXT, 275))
    assert "ord()" in message
    message = _failure(checks.check_train_bpe, buggy["train_bpe"], MIXED_TEXT, 290)
    assert "merge number" in message


def _chapter_one_specs() -> list[str]:
    """The lab's demo students whose bug lives in this chapter (they name 01_tokenization)."""
    return sorted(path.stem for path in DEMO_SPECS.glob("*.py")
                  if "01_tokenization" in runpy.run_path(str(path)).get("EXPECTED", {}))


@pytest.mark.parametrize("name", _chapter_one_specs())
def test_demo_specs_name_real_answer_cells(name):
    spec = runpy.run_path(str(DEMO_SPECS / f"{name}.py"))
    assert spec["BASE"] in ("solution", "release")
    score = spec["EXPECTED"]["01_tokenization"]
    if isinstance(score, dict):   # a written-* student: its answers are the chapter's written questions
        written = {cell["metadata"]["nbgrader"]["grade_id"] for cell in written_cells(nbformat.read(SOLUTION, as_version=4))}
        assert set(spec["ANSWERS"]) <= written and spec["ANSWERS"]
        assert re.search(rf"\b{score['auto']:g}\b", spec["DESCRIPTION"]), "the description states the autograder's points"
        return
    assert set(spec["ANSWERS"]) <= set(_answer_sources())
    assert f"expected {score:g}/" in spec["DESCRIPTION"]


def test_a_stub_reports_not_implemented():
    def merge_pair(ids, pair, new_id):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_merge_pair(merge_pair, [1, 2], (1, 2), 256)


def test_a_crash_becomes_feedback_that_names_the_call():
    def get_pair_counts(ids):
        return {(ids[0], ids[1]): 1}

    message = _failure(checks.check_get_pair_counts, get_pair_counts, [])
    assert "get_pair_counts([]) raised IndexError" in message


def test_reexporting_the_reference_earns_nothing():
    import course_lib.tokenizer as tokenizer_module
    from course_lib.tokenizer import BPETokenizer

    _failure(checks.check_merge_pair, tokenizer_module.merge_pair, [1, 2], (1, 2), 256)

    def train_bpe(text, vocab_size):
        return tokenizer_module.train_bpe(text, vocab_size)

    assert "reference" in _failure(checks.check_train_bpe, train_bpe, "aaab", 258)

    def encode(text, merges):
        return BPETokenizer([bytes([b]) for b in range(256)], {}).encode(text)

    assert "reference" in _failure(checks.check_encode, encode, "abc", {})


def test_input_mutation_and_wrong_types_are_reported():
    def merge_pair(ids, pair, new_id):
        ids.append(0)
        return ids

    assert "changed its input list" in _failure(checks.check_merge_pair, merge_pair, [1, 2], (1, 2), 256)

    def embed(token_ids, table):
        return table[torch.as_tensor(token_ids)].double()

    assert "wrong dtype" in _failure(checks.check_embed, embed, [1], torch.zeros(3, 2))

    def embedding_bytes(vocab_size, d_model, bytes_per_element):
        return vocab_size * d_model * bytes_per_element / 2**20

    assert "not MiB" in _failure(checks.check_embedding_bytes, embedding_bytes, 50_000, 4_096, 2)


@pytest.mark.slow
def test_smollm2_embedding_matches_the_gguf_file():
    info = checks.smollm2_embedding_info()
    assert (info["vocab_size"], info["d_model"], info["type"]) == (49_152, 576, "Q8_0")
    assert info["vocab_size"] * info["d_model"] * info["bytes_per_element"] == info["n_bytes"] == 30_081_024
    table = checks.smollm2_embedding_table()
    assert table.shape == (49_152, 576) and table.dtype == torch.float32

    def embed(token_ids, table):
        return table[torch.as_tensor(token_ids)]

    checks.check_embed(embed, [19556, 905], "smollm2")  # the table named, not passed
    assert "differ from the table" in _failure(checks.check_embed, lambda ids, table: embed(ids, table) * 2,
                                               [19556, 905], "smollm2")
    with pytest.raises(ValueError, match="'smollm2'"):
        checks.check_embed(embed, [1], "llama")


def test_solution_header_announces_the_total_points():
    notebook = nbformat.read(SOLUTION, as_version=4)
    graded = [cell.metadata["nbgrader"] for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code"]
    total = sum(meta["points"] for meta in graded)
    assert points_summary(notebook) in notebook.cells[0].source   # its written answer's points too
    assert f"{total:g} in {len(graded)} graded test cells" in notebook.cells[0].source


# ---------------------------------------------------------------------------------------------
# Inputs described by plain arguments, and the documented ValueError
# ---------------------------------------------------------------------------------------------


def test_inputs_built_inside_the_checks_match_the_explicit_ones(reference):
    cat = (CAT_TEXT, 275)
    checks.check_encode(reference["encode"], "the rat sat", trained_on=cat)
    checks.check_decode(reference["decode"], text="the naïve cat ✓", trained_on=cat)
    checks.check_decode(reference["decode"], random_ids=(3, 50), trained_on=(MIXED_TEXT, 300))
    checks.check_build_vocab(reference["build_vocab"], trained_on=cat)
    with pytest.raises(ValueError, match="exactly one"):
        checks.check_encode(reference["encode"], "x", {}, trained_on=cat)
    with pytest.raises(ValueError, match="exactly one"):
        checks.check_decode(reference["decode"], [1], text="x", trained_on=cat)


def test_decode_bugs_are_caught_on_inputs_built_inside_the_check():
    buggy = _student(_demo_answers("buggy-decode-per-token"))
    message = _failure(checks.check_decode, buggy["decode"], text="the naïve cat ✓", trained_on=(CAT_TEXT, 275))
    assert "replacement characters" in message


def test_unknown_precision_must_raise_value_error(reference):
    checks.check_bytes_per_element(reference["bytes_per_element"], "fp12")
    checks.check_bytes_per_element(reference["bytes_per_element"], "FP16")
    message = _failure(checks.check_bytes_per_element, _student(_demo_answers("buggy-bytes-per-element-keyerror"))["bytes_per_element"],
                       "fp12")
    assert "raised KeyError; the docstring promises ValueError" in message

    def silent(precision):
        return {"fp32": 4.0, "fp16": 2.0}.get(precision, 0.0)

    assert "returned instead of raising" in _failure(checks.check_bytes_per_element, silent, "int2")

    def mute_error(precision):
        if precision not in {"fp64", "fp32", "fp16", "bf16", "fp8", "int8", "int4"}:
            raise ValueError("bad")
        return {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}[precision]

    assert "names neither the precision nor the allowed ones" in _failure(
        checks.check_bytes_per_element, mute_error, "int2")


# ---------------------------------------------------------------------------------------------
# The references: the exercises' form against the platform tokenizer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "aaabdaaabac", "the café 猫 🙂 ok", MIXED_TEXT[::-1], "  spaces\n\n and tabs\t"])
def test_reference_encode_decode_vocab_agree_with_the_platform_tokenizer(text):
    from course_lib.tokenizer import BPETokenizer, build_vocab, decode_with_merges, encode_with_merges

    merges = checks.reference_merges(MIXED_TEXT + CAT_TEXT, 320)
    vocab = build_vocab(merges)
    tokenizer = BPETokenizer([vocab[token_id] for token_id in range(len(vocab))], merges)
    ids = encode_with_merges(text, merges)
    assert ids == tokenizer.encode(text)
    assert decode_with_merges(ids, merges) == tokenizer.decode(ids) == text


def test_smollm2_merges_renumbered_give_smollm2_ids():
    from course_lib.tokenizer import BPETokenizer, encode_with_merges

    tokenizer = BPETokenizer.from_gguf()
    merges, own_ids = tokenizer.byte_level_merges()
    assert len(merges) == len(tokenizer.merges) and list(merges.values())[:2] == [256, 257]
    for text in ["Return the number of items in a container.", "Straße, naïve café: 猫が好き 🙂", "पुस्तकालय सुबह"]:
        assert [own_ids[token_id] for token_id in encode_with_merges(text, merges)] == tokenizer.encode(text)
    first_1000 = dict(list(merges.items())[:1000])
    assert max(first_1000.values()) == 1255   # a prefix of the merges is a smaller vocabulary


def test_a_locked_lab_keeps_smollm2s_tokenizer_and_refuses_custom_merges(monkeypatch):
    from course_lib import exercises
    from course_lib.tokenizer import BPETokenizer, build_vocab

    monkeypatch.setattr(exercises, "locked_labs", lambda: frozenset({"lab01-text-to-tensors"}))
    monkeypatch.setattr("course_lib.tokenizer.is_locked", lambda lab: lab == "lab01-text-to-tensors")
    smollm2 = BPETokenizer.from_gguf()
    assert smollm2.decode(smollm2.encode("Hello world")) == "Hello world"
    merges = {(97, 97): 256}
    vocab = build_vocab(merges)
    custom = BPETokenizer([vocab[token_id] for token_id in range(len(vocab))], merges)
    with pytest.raises(NotImplementedError, match="Lab 0.1 chapter 1"):
        custom.encode("aaa")


def test_int4_by_integer_division_fails_the_visible_int4_case_with_a_hint():
    buggy = _student(_demo_answers("buggy-int4-floor-division"))
    for precision in ("fp32", "fp16", "int8"):
        checks.check_bytes_per_element(buggy["bytes_per_element"], precision)   # whole bytes: right
    message = _failure(checks.check_bytes_per_element, buggy["bytes_per_element"], "int4")
    assert "expected: 0.5" in message and "got:      0" in message
    assert "integer division (//)" in message


def test_ties_broken_by_first_occurrence_are_told_the_tie_rule():
    # A trainer that takes the first most frequent pair in the order pairs occur (dict order), not the
    # smallest: "aaabdaaabac" 262 meets a tie at merge 1 (Za and ab, twice each).
    source = _answer_sources()["train_bpe"].replace("best = min(counts, key=lambda pair: (-counts[pair], pair))",
                                                    "best = max(counts, key=counts.get)")
    assert source != _answer_sources()["train_bpe"]
    buggy = _student({"train_bpe": source})
    message = _failure(checks.check_train_bpe, buggy["train_bpe"], "aaabdaaabac", 262)
    assert "merge number 1" in message and "a tie" in message and "(97, 98) < (256, 97)" in message
