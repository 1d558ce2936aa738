"""Checks for Lab 0.1, chapter 1 (tokenization and embeddings).

Each ``check_*`` function takes the student's function and one input, runs the student's code on
a copy of that input, computes the answer with the reference in :mod:`course_lib.tokenizer`
(or with torch for the embedding), and raises :class:`~course_lib.checks.CheckFailed` with what
was expected, what came back and a hint aimed at the usual mistake. The notebook's test cells
choose the inputs, so hidden tests are simply calls with inputs the release never shows.

The merges a student's trainer returns are ``{(left id, right id): new id}``, ids 0..255 being
the byte values and merge k creating id 256 + k, exactly as in the reference.

Inputs that need the reference to build (a vocabulary trained on some text, the ids of a text) are
described by plain arguments (``trained_on=(text, vocab_size)``, ``text=``) and built inside the
check, through ``reference(...)``, so a test cell never calls a reference itself.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import Callable

from course_lib import memory
from course_lib.checks import (
    call_student,
    fail,
    register_reference_names,
    require_own_implementation,
    short_repr,
)
from course_lib.checks.fixtures import mode, recorded_check, reference
from course_lib.tokenizer import (
    NUM_BYTE_VALUES,
    build_vocab,
    decode_with_merges,
    encode_with_merges,
    get_pair_counts,
    merge_pair,
    pretokenize,
    train_bpe,
)

__all__ = [
    "BITS_PER_PRECISION",
    "check_build_vocab",
    "check_bytes_per_element",
    "check_decode",
    "check_embed",
    "check_embedding_bytes",
    "check_encode",
    "check_get_pair_counts",
    "check_merge_pair",
    "check_train_bpe",
    "random_ids",
    "random_text",
    "reference_encode",
    "reference_merges",
    "reference_vocab",
    "smollm2_embedding_info",
    "smollm2_embedding_table",
]

# An answer that calls one of these is re-exporting the reference, not the student's own work.
register_reference_names(
    "BPETokenizer", "get_pair_counts", "merge_pair", "train_bpe", "train_bpe_naive", "best_pair", "count_words",
    "reference_merges", "reference_encode", "reference_vocab", "build_vocab", "encode_with_merges",
    "decode_with_merges",
)

# Bits per stored number for the precisions the course uses (chapter 2 reuses these names).
BITS_PER_PRECISION = {"fp64": 64, "fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}

Pair = tuple[int, int]

# The reference side of every check (recorded for the student kit, see course_lib.checks.fixtures).
_reference_get_pair_counts = reference(get_pair_counts)
_reference_merge_pair = reference(merge_pair)
_reference_train_bpe = reference(train_bpe)
_reference_build_vocab = reference(build_vocab)
_reference_encode = reference(encode_with_merges)
_reference_decode = reference(decode_with_merges)
_reference_bytes_per_element = reference(memory.bytes_per_element)
_reference_embedding_bytes = reference(memory.embedding_bytes)


# ---------------------------------------------------------------------------------------------
# Helpers shared by the checks
# ---------------------------------------------------------------------------------------------


def _describe_token(token_id: int, vocab: dict[int, bytes]) -> str:
    data = vocab.get(token_id)
    return f"{token_id} ({data!r})" if data is not None else str(token_id)


def _describe_merge(pair: Pair, new_id: int, vocab: dict[int, bytes]) -> str:
    left, right = pair
    return f"({left}, {right}) -> {new_id}  i.e. {vocab.get(left, b'?')!r} + {vocab.get(right, b'?')!r}"


def reference_vocab(merges: dict[Pair, int]) -> dict[int, bytes]:
    """Id -> bytes for the 256 byte values and every merge, built in rank order."""
    return _reference_build_vocab(dict(merges))


def _partial_vocab(merges: list[tuple[Pair, int]]) -> dict[int, bytes]:
    """Like reference_vocab for a student's merges, skipping merges whose parts are unknown ids."""
    vocab = {byte: bytes([byte]) for byte in range(NUM_BYTE_VALUES)}
    for (left, right), new_id in merges:
        if left in vocab and right in vocab:
            vocab[new_id] = vocab[left] + vocab[right]
    return vocab


def reference_merges(text: str, vocab_size: int) -> dict[Pair, int]:
    """The merges the reference trainer learns on ``text``."""
    return _reference_train_bpe(text, vocab_size)


def reference_encode(text: str, merges: dict[Pair, int]) -> list[int]:
    """The reference tokenizer's ids for ``text`` under ``merges``."""
    return _reference_encode(text, dict(merges))


def _merges_for(merges: dict[Pair, int] | None, trained_on: tuple[str, int] | None) -> dict[Pair, int]:
    """The merges a check works with: given as a dict, or ``trained_on=(text, vocab_size)``."""
    if (merges is None) == (trained_on is None):
        raise ValueError("pass exactly one of merges (a dict) and trained_on=(text, vocab_size)")
    if merges is not None:
        return {tuple(pair): new_id for pair, new_id in merges.items()}
    text, vocab_size = trained_on
    return reference_merges(text, vocab_size)


def _first_difference(got: list, expected: list) -> int:
    for index, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return index
    return min(len(got), len(expected))


def random_ids(seed: int, length: int, alphabet_size: int = 4) -> list[int]:
    """A reproducible list of ids drawn from ``range(alphabet_size)`` (few symbols: many repeats)."""
    rng = random.Random(seed)
    return [rng.randrange(alphabet_size) for _ in range(length)]


def random_text(seed: int, num_words: int, alphabet: str = "abcdeéñ猫🙂 ") -> str:
    """Reproducible text of ``num_words`` short "words" over ``alphabet`` (mixed UTF-8 widths)."""
    rng = random.Random(seed)
    letters = alphabet.replace(" ", "")
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 6))) for _ in range(num_words)]
    return " ".join(words)


# ---------------------------------------------------------------------------------------------
# (a) pairs and one merge
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_get_pair_counts(student_get_pair_counts: Callable, ids: list[int]) -> None:
    """``student_get_pair_counts(ids)`` must equal the reference's pair counts, overlaps included."""
    require_own_implementation(student_get_pair_counts, "get_pair_counts")
    got = call_student(student_get_pair_counts, "get_pair_counts", list(ids))
    if not isinstance(got, dict):
        fail(f"get_pair_counts({short_repr(ids)}) must return a dict {{(left, right): count}}",
             expected="dict", got=type(got).__name__)
    expected = _reference_get_pair_counts(list(ids))
    if got == expected:
        return
    missing = [pair for pair in expected if got.get(pair) != expected[pair]]
    extra = [pair for pair in got if pair not in expected]
    hint = "look at every position i from 0 to len(ids) - 2 and count the pair (ids[i], ids[i + 1])."
    if missing and all(got.get(pair, 0) < expected[pair] for pair in missing) and not extra:
        hint = ("some pairs are counted too rarely: count overlapping pairs too ([97, 97, 97] holds (97, 97) "
                "twice), and do not skip the last pair.")
    elif extra:
        hint = "some pairs should not be there: a pair is two *neighbouring* ids, in order (left, right)."
    pair = (missing or extra)[0]
    fail(f"get_pair_counts({short_repr(ids)}): wrong count for pair {pair}",
         expected=expected.get(pair, "no entry for this pair"), got=got.get(pair, "no entry for this pair"),
         hint=hint)


@recorded_check
def check_merge_pair(student_merge_pair: Callable, ids: list[int], pair: Pair, new_id: int) -> None:
    """``student_merge_pair(ids, pair, new_id)`` must equal the reference and leave ``ids`` unchanged."""
    require_own_implementation(student_merge_pair, "merge_pair")
    original = list(ids)
    given = list(ids)  # not copied for the call: the check looks for changes to it below
    got = call_student(student_merge_pair, f"merge_pair({short_repr(original)}, {pair}, {new_id})", given,
                       tuple(pair), new_id, copy_args=False, show_args=False,
                       hints={Exception: "check the index bounds: the last id has no right neighbour."})
    if given != original:
        fail(f"merge_pair({short_repr(original)}, {pair}, {new_id}) changed its input list",
             expected=original, got=given, hint="build and return a new list; leave `ids` as it was.")
    if not isinstance(got, list):
        fail(f"merge_pair({short_repr(original)}, {pair}, {new_id}) must return a list",
             expected="list", got=type(got).__name__)
    expected = _reference_merge_pair(original, tuple(pair), new_id)
    if got == expected:
        return
    if len(got) > len(expected) and got.count(new_id) > expected.count(new_id):
        hint = ("you made more replacements than possible: after replacing the pair at positions i and i + 1, "
                "continue at i + 2, so in [97, 97, 97] only the first two ids merge: [256, 97].")
    elif len(got) < len(expected):
        hint = "ids are missing: keep every id that is not part of a replaced pair, the last one included."
    else:
        hint = ("scan from the left; where ids[i], ids[i + 1] equals the pair, append new_id and jump to i + 2, "
                "otherwise append ids[i] and go to i + 1.")
    index = _first_difference(got, expected)
    fail(f"merge_pair({short_repr(original)}, {pair}, {new_id}) differs first at position {index}",
         expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# (b) training
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_train_bpe(student_train_bpe: Callable, text: str, vocab_size: int) -> None:
    """``student_train_bpe(text, vocab_size)`` must learn the reference's merges, ids and order."""
    require_own_implementation(student_train_bpe, "train_bpe")
    got = call_student(student_train_bpe, "train_bpe", text, vocab_size)
    call = f"train_bpe({short_repr(text)}, {vocab_size})"
    if not isinstance(got, dict):
        fail(f"{call} must return a dict {{(left id, right id): new id}}", expected="dict",
             got=type(got).__name__)
    malformed = [(pair, new_id) for pair, new_id in got.items() if not _is_merge(pair, new_id)]
    expected = reference_merges(text, vocab_size)
    expected_items = list(expected.items())
    if malformed:
        fail(f"{call}: each entry must be (left id, right id) -> new id, all ints", expected=expected_items[:3],
             got=malformed[:3], hint="key: a tuple of the two ids merged; value: the id of the new token.")
    got_items = sorted(got.items(), key=lambda item: item[1])
    # What a failure explains comes from the reference, asked before the comparison wherever the answer
    # may be replayed (the kit's recording must hold it); the grader, with the real reference, asks only
    # when it needs it.
    vocab = reference_vocab(expected)
    counts_by_step = _reference_counts_by_step(text, vocab_size) if mode() != "instructor" else None
    if got_items == expected_items:
        return
    if len(got_items) != len(expected_items) and got_items == expected_items[: len(got_items)]:
        fail(f"{call} learned {len(got_items)} merges; the reference learns {len(expected_items)}",
             expected=len(expected_items), got=len(got_items),
             hint=(f"a vocabulary of {vocab_size} ids holds the 256 bytes plus {vocab_size - NUM_BYTE_VALUES} "
                   "merges; stop early only when no word has two tokens left."))
    if len(got_items) > len(expected_items) and got_items[: len(expected_items)] == expected_items:
        fail(f"{call} learned {len(got_items)} merges; the reference learns {len(expected_items)}",
             expected=len(expected_items), got=len(got_items),
             hint=(f"ids run from 0 to vocab_size - 1 = {vocab_size - 1}: stop when the next id would be "
                   f"{vocab_size}, or earlier when no word has two tokens left (if your merges never make "
                   "the words shorter, check merge_pair)."))
    rank = _first_difference(got_items, expected_items)  # < both lengths: neither list is a prefix
    expected_pair, expected_id = expected_items[rank]
    what = f"{call}: merge number {rank} (counting from 0) differs"
    got_pair, got_id = got_items[rank]
    if got_pair == expected_pair or got_id != expected_id:
        if rank == 0:
            hint = "ids 0..255 are the bytes, so the first merge gets id 256, the next 257, and so on."
        else:
            hint = f"merge k gets id 256 + k, so merge {rank} gets {NUM_BYTE_VALUES + rank}."
        fail(what, expected=_describe_merge(expected_pair, expected_id, vocab),
             got=f"({got_pair[0]}, {got_pair[1]}) -> {got_id}", hint=hint)
    counts = (counts_by_step or _reference_counts_by_step(text, vocab_size))[rank]
    got_count = counts.get(got_pair, 0)
    expected_count = counts[expected_pair]
    if got_count == expected_count:
        hint = (f"both pairs occur {expected_count} times at this point: a tie. The rule is: among the most "
                f"frequent pairs take the smallest, comparing (left, right) as tuples; "
                f"{expected_pair} < {got_pair}.")
    elif got_count == 0:
        hint = ("the pair you merged does not occur in the (pre-tokenized) text at this point: check that you "
                "use the UTF-8 bytes (text.encode('utf-8')), split the text with pretokenize(text), and "
                "merge inside every word after each step.")
    else:
        hint = (f"at this point {expected_pair} occurs {expected_count} times and {got_pair} only {got_count}: "
                "recount the pairs of every word after each merge, and count pairs within words only "
                "(never across the pretokenize boundaries).")
    fail(what, expected=_describe_merge(expected_pair, expected_id, vocab),
         got=_describe_merge(got_pair, got_id, _partial_vocab(got_items[: rank + 1])), hint=hint)


def _is_merge(pair: object, new_id: object) -> bool:
    def is_id(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    return isinstance(pair, tuple) and len(pair) == 2 and all(map(is_id, pair)) and is_id(new_id)


def _counts_by_step(text: str, vocab_size: int) -> list[dict[Pair, int]]:
    """The pair counts over the pre-tokenized words of ``text`` before each merge the reference learns."""
    words = [list(word.encode("utf-8")) for word in pretokenize(text)]
    steps = []
    for pair, new_id in train_bpe(text, vocab_size).items():
        counts: dict[Pair, int] = {}
        for word in words:
            for neighbours, count in get_pair_counts(word).items():
                counts[neighbours] = counts.get(neighbours, 0) + count
        steps.append(counts)
        words = [merge_pair(word, pair, new_id) for word in words]
    return steps


_reference_counts_by_step = reference(_counts_by_step)


# ---------------------------------------------------------------------------------------------
# (c) encoding
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_encode(student_encode: Callable, text: str, merges: dict[Pair, int] | None = None, *,
                 trained_on: tuple[str, int] | None = None) -> None:
    """``student_encode(text, merges)`` must give the reference tokenizer's ids for ``text``.

    merges: the merges to encode with, or ``trained_on=(training text, vocab_size)`` to use the
    reference trainer's.
    """
    require_own_implementation(student_encode, "encode")
    merges = _merges_for(merges, trained_on)
    got = call_student(student_encode, "encode", text, dict(merges))
    call = f"encode({short_repr(text)}, merges)"
    if not isinstance(got, list):
        fail(f"{call} must return a list of ints", expected="list", got=type(got).__name__)
    expected = reference_encode(text, merges)
    vocab = reference_vocab(merges)   # on every run: the kit's recording must hold it for a wrong answer's message
    if got == expected:
        return
    known_ids = set(vocab)
    unknown = [token_id for token_id in got if token_id not in known_ids]
    index = _first_difference(got, expected)
    if unknown:
        hint = (f"id {unknown[0]} is neither a byte (0..255) nor a merge: start from the UTF-8 bytes, "
                "list(text.encode('utf-8')), not from ord() of each character.")
    elif b"".join(vocab[token_id] for token_id in got) != text.encode("utf-8"):
        hint = "your ids do not spell the text: decode them and compare; did you drop or repeat a byte?"
    elif len(got) > len(expected):
        hint = ("your ids spell the text but use more tokens: either a pair that has a merge was left "
                "unmerged (keep going until no adjacent pair has one) or merges were applied out of order "
                "(always the lowest new id first, then look again); work word by word with pretokenize(text).")
    else:
        hint = ("the merges were applied in the wrong order (or across word boundaries): always merge the "
                "pair with the lowest new id (learned first), then look again; work word by word.")
    fail(f"{call} differs first at position {index} (merges: {len(merges)})",
         expected=[_describe_token(t, vocab) for t in expected[index:index + 4]],
         got=[_describe_token(t, vocab) for t in got[index:index + 4]], hint=hint)


# ---------------------------------------------------------------------------------------------
# (d) decoding
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_build_vocab(student_build_vocab: Callable, merges: dict[Pair, int] | None = None, *,
                      trained_on: tuple[str, int] | None = None) -> None:
    """``student_build_vocab(merges)`` must map every id (bytes and merges) to its bytes."""
    require_own_implementation(student_build_vocab, "build_vocab")
    merges = _merges_for(merges, trained_on)
    got = call_student(student_build_vocab, "build_vocab", dict(merges))
    if not isinstance(got, dict):
        fail("build_vocab(merges) must return a dict {id: bytes}", expected="dict", got=type(got).__name__)
    expected = reference_vocab(merges)
    if set(got) != set(expected):
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        fail(f"build_vocab(merges) has the wrong ids (missing: {short_repr(missing)}, extra: {short_repr(extra)})",
             expected=f"ids 0..{len(expected) - 1}", got=f"{len(got)} ids",
             hint="one entry per byte value 0..255, plus one per merge (its new id).")
    for token_id in sorted(expected):
        if got[token_id] != expected[token_id]:
            hint = None
            if not isinstance(got[token_id], bytes):
                hint = "values must be bytes objects: bytes([b]) for a byte value, left + right for a merge."
            else:
                hint = ("a merged token's bytes are its left part's bytes followed by its right part's bytes; "
                        "build them in merge order so both parts exist already.")
            fail(f"build_vocab(merges)[{token_id}] is wrong", expected=expected[token_id], got=got[token_id],
                 hint=hint)


@recorded_check
def check_decode(student_decode: Callable, ids: list[int] | None = None, merges: dict[Pair, int] | None = None, *,
                 text: str | None = None, random_ids: tuple[int, int] | None = None,
                 trained_on: tuple[str, int] | None = None) -> None:
    """``student_decode(ids, merges)`` must give the reference's text (U+FFFD for invalid UTF-8).

    ids: the ids to decode; or ``text=`` to decode the reference's encoding of that text; or
    ``random_ids=(seed, count)`` for ``count`` ids drawn from the whole vocabulary (often invalid UTF-8).
    merges: a dict, or ``trained_on=(training text, vocab_size)``.
    """
    require_own_implementation(student_decode, "decode")
    merges = _merges_for(merges, trained_on)
    if sum(given is not None for given in (ids, text, random_ids)) != 1:
        raise ValueError("pass exactly one of ids, text and random_ids")
    if text is not None:
        ids = reference_encode(text, merges)
    elif random_ids is not None:
        seed, count = random_ids
        rng = random.Random(seed)
        ids = [rng.randrange(NUM_BYTE_VALUES + len(merges)) for _ in range(count)]
    ids = list(ids)
    got = call_student(student_decode, "decode", list(ids), dict(merges))
    call = f"decode({short_repr(ids)}, merges)"
    if not isinstance(got, str):
        fail(f"{call} must return a str", expected="str", got=type(got).__name__,
             hint="decode the joined bytes: data.decode('utf-8', errors='replace').")
    expected = _reference_decode(list(ids), merges)
    if got == expected:
        return
    if got.count("\ufffd") > expected.count("\ufffd"):
        hint = ("your text has more replacement characters '\ufffd' than the reference: a character's bytes "
                "can be spread over several tokens, so join the bytes of *all* tokens first and decode once.")
    elif expected.count("\ufffd") > got.count("\ufffd"):
        hint = "these bytes are not valid UTF-8: decode with errors='replace' so they become '\ufffd'."
    else:
        hint = "join vocab[i] for every id in order (b''.join), then .decode('utf-8', errors='replace')."
    fail(f"{call} differs first at character {_first_difference(list(got), list(expected))}",
         expected=expected, got=got, hint=hint)


# ---------------------------------------------------------------------------------------------
# (e) embeddings
# ---------------------------------------------------------------------------------------------


@recorded_check
def check_embed(student_embed: Callable, token_ids, table) -> None:
    """``student_embed(token_ids, table)`` must return ``table[token_ids]`` exactly: [seq_len, d_model].

    table: a Tensor, or ``"smollm2"`` for SmolLM2's real table (read here, so a recording of the check
    names it instead of holding 113 MB of floats)."""
    import torch

    if isinstance(table, str):
        if table != "smollm2":
            raise ValueError(f"table must be a Tensor or 'smollm2', got {table!r}")
        table = smollm2_embedding_table()
    require_own_implementation(student_embed, "embed")
    got = call_student(student_embed, "embed", token_ids, table)
    index = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    expected = table[index]
    call = f"embed({short_repr(token_ids if not torch.is_tensor(token_ids) else token_ids.tolist())}, table)"
    if not torch.is_tensor(got):
        fail(f"{call} must return a torch.Tensor", expected="torch.Tensor", got=type(got).__name__,
             hint="index the table with a tensor of ids: table[torch.as_tensor(token_ids)].")
    if tuple(got.shape) != tuple(expected.shape):
        fail(f"{call}: wrong shape for {len(index)} ids and a table of shape {tuple(table.shape)}",
             expected=tuple(expected.shape), got=tuple(got.shape),
             hint="one row per id: [seq_len, d_model]. Rows of the table are tokens, columns are dimensions.")
    if got.dtype != expected.dtype:
        fail(f"{call}: wrong dtype", expected=expected.dtype, got=got.dtype,
             hint="a lookup copies rows; it should not change the table's dtype.")
    if not torch.equal(got, expected):
        bad_rows = (got != expected).any(dim=1).nonzero().flatten().tolist()
        fail(f"{call}: rows {short_repr(bad_rows)} differ from the table's rows for those ids",
             expected=f"row {bad_rows[0]} = table[{int(index[bad_rows[0]])}]",
             got=f"a different row (first values {got[bad_rows[0], :3].tolist()})",
             hint="row i of the result is table[token_ids[i]], copied exactly (no scaling, no sorting).")


@recorded_check
def check_bytes_per_element(student_bytes_per_element: Callable, precision: str) -> None:
    """``student_bytes_per_element(precision)`` must be bits / 8 (fractional for int4), and raise
    ValueError (the documented type) for a precision outside the table."""
    require_own_implementation(student_bytes_per_element, "bytes_per_element")
    if precision not in BITS_PER_PRECISION:
        _expect_value_error(student_bytes_per_element, precision)
        return
    got = call_student(student_bytes_per_element, "bytes_per_element", precision)
    expected = _reference_bytes_per_element(precision)
    try:
        ok = math.isclose(float(got), expected)
    except (TypeError, ValueError):
        ok = False
    if ok:
        return
    if isinstance(got, (int, float)) and math.isclose(float(got), expected * 8):
        hint = f"{got} is the number of *bits*; a byte is 8 bits."
    elif isinstance(got, (int, float)) and expected < 1 and float(got) == 0:
        hint = "integer division (//) rounds half a byte down to 0: divide with /."
    else:
        hint = "the number in the name is bits per element (fp16: 16 bits); a byte is 8 bits."
    fail(f"bytes_per_element({precision!r})", expected=expected, got=got, hint=hint)


def _expect_value_error(student_bytes_per_element: Callable, precision: str) -> None:
    call = f"bytes_per_element({precision!r})"
    try:
        got = student_bytes_per_element(precision)
    except NotImplementedError:
        raise
    except ValueError as error:
        if precision not in str(error) and not any(name in str(error) for name in BITS_PER_PRECISION):
            fail(f"{call} raised ValueError, but its message names neither the precision nor the allowed ones",
                 expected=f"a message naming {precision!r} and the allowed precisions", got=str(error),
                 hint="write the error for the reader: say what was given and what is allowed.")
        return
    except Exception as error:  # the wrong type: a caller catching ValueError would miss it
        fail(f"{call} raised {type(error).__name__}; the docstring promises ValueError", expected="ValueError",
             got=f"{type(error).__name__}: {error}",
             hint="check the precision first and raise ValueError(...) yourself, rather than letting a dict "
                  "lookup raise KeyError.")
    fail(f"{call} returned instead of raising: {precision!r} is not a precision", expected="ValueError",
         got=got, hint="raise ValueError naming the allowed precisions for anything not in the table.")


@recorded_check
def check_embedding_bytes(student_embedding_bytes: Callable, vocab_size: int, d_model: int,
                          bytes_per_element: float) -> None:
    """``student_embedding_bytes(vocab_size, d_model, bytes_per_element)`` = their product."""
    require_own_implementation(student_embedding_bytes, "embedding_bytes")
    got = call_student(student_embedding_bytes, "embedding_bytes", vocab_size, d_model, bytes_per_element)
    expected = _reference_embedding_bytes(vocab_size, d_model, bytes_per_element)
    try:
        ok = math.isclose(float(got), expected, rel_tol=1e-9)
    except (TypeError, ValueError):
        ok = False
    if ok:
        return
    hint = "a [vocab_size, d_model] table holds vocab_size * d_model numbers, each bytes_per_element bytes."
    if isinstance(got, (int, float)):
        if math.isclose(float(got), expected / 2**20, rel_tol=1e-6) or math.isclose(float(got), expected / 1e6):
            hint = "return bytes, not MiB or MB: the notebook converts for display."
        elif math.isclose(float(got), expected * 8, rel_tol=1e-9):
            hint = "that is bits; return bytes."
    fail(f"embedding_bytes({vocab_size}, {d_model}, {bytes_per_element})", expected=expected, got=got, hint=hint)


@lru_cache(maxsize=1)
def smollm2_embedding_info() -> dict:
    """Shape and storage of SmolLM2's ``token_embd.weight`` as the GGUF file records them.

    Returns ``{"vocab_size", "d_model", "type", "block_size", "bytes_per_block",
    "bytes_per_element", "n_bytes", "model_parameters"}``. GGUF lists a tensor's dimensions
    fastest-varying first, so the file's [576, 49152] is the [49152, 576] table a PyTorch user
    would write. ``model_parameters`` counts the numbers in all of the file's tensors.
    """
    import gguf

    from course_lib.gguf_file import read_tensor_infos

    tensors = read_tensor_infos()  # from the disk cache: the header is not parsed again
    tensor = next(t for t in tensors if t.name == "token_embd.weight")
    block_size, bytes_per_block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[tensor.type]]
    d_model, vocab_size = tensor.shape
    return {
        "vocab_size": vocab_size,
        "d_model": d_model,
        "type": tensor.type,
        "block_size": block_size,
        "bytes_per_block": bytes_per_block,
        "bytes_per_element": bytes_per_block / block_size,
        "n_bytes": tensor.n_bytes,
        "model_parameters": sum(t.n_elements for t in tensors),
    }


@lru_cache(maxsize=1)
def smollm2_embedding_table():
    """SmolLM2's token embedding dequantized to float32: a Tensor [49152, 576].

    Cached: test cells share one copy, so a check must never let an answer write into it
    (``check_embed`` passes the answer a copy).
    """
    import torch

    from course_lib.gguf_file import dequantize_by_name

    # From the disk cache when an earlier process made it: neither the GGUF header (3 s) nor the
    # dequantization is repeated.
    return torch.from_numpy(dequantize_by_name("token_embd.weight"))
