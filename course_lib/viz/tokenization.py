"""A widget for Lab 0.1, chapter 1: step through BPE merges and watch the words fuse into tokens."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_lib.viz import PALETTE, _new_figure
from course_lib.viz.widgets import FigureExplorer, int_slider

__all__ = ["merge_figure", "merge_stepper"]

Pair = tuple[int, int]


def _token_text(token_bytes: bytes) -> str:
    return token_bytes.decode("utf-8", errors="replace").replace(" ", "\u2423").replace("\n", "\u21b5")


def merge_figure(words: list[list[int]], vocab: Mapping[int, bytes], step: int, last_merge: tuple[Pair, int] | None,
                 *, title: str | None = None, line_width: float = 48.0) -> Figure:
    """The words as token boxes, flowing like text; tokens made by the latest merge are highlighted.

    words: token ids of each word; vocab: id -> bytes; step: merges applied so far;
    last_merge: ((left, right), new id) of the latest merge, or None before the first one.
    Box widths follow the number of characters, on one scale for every state.
    """
    boxes = []  # (x, row, width, label, colour)
    x, row = 0.0, 0
    for word in words:
        labels = [_token_text(vocab[token_id]) for token_id in word]
        word_width = sum(0.6 * len(label) + 0.5 for label in labels)
        if x > 0 and x + word_width > line_width:
            x, row = 0.0, row + 1
        for token_id, label in zip(word, labels):
            width = 0.6 * len(label) + 0.4
            fresh = last_merge is not None and token_id == last_merge[1]
            colour = PALETTE[1] if fresh else (PALETTE[5] if token_id >= 256 else "#eeeeee")
            boxes.append((x, row, width, label, colour))
            x += width + 0.1
        x += 0.6  # the gap between words: merges never cross it
    num_rows = row + 1
    fig, axes = _new_figure(width=9, height=0.42 * num_rows + 0.9)
    for x, row, width, label, colour in boxes:
        axes.add_patch(Rectangle((x, -row - 0.38), width, 0.76, facecolor=colour, edgecolor="#555555"))
        axes.text(x + width / 2, -row, label, ha="center", va="center", fontsize=9, family="monospace")
    axes.set(xlim=(-0.2, line_width + 0.2), ylim=(-num_rows + 0.45, 0.55), xticks=[], yticks=[])
    for spine in axes.spines.values():
        spine.set_visible(False)
    num_tokens = sum(len(word) for word in words)
    if last_merge is None:
        caption = f"before any merge: {num_tokens} tokens (one per byte)"
    else:
        (left, right), new_id = last_merge
        caption = (f"after {step} merges: {num_tokens} tokens; the last merge made id {new_id} = "
                   f"{_token_text(vocab[left])!r} + {_token_text(vocab[right])!r} (orange)")
    axes.set_title(title or caption, fontsize=10, loc="left")
    return fig


def merge_stepper(text: str, merges: Mapping[Pair, int], merge_pair: Callable[[list[int], Pair, int], list[int]], *,
                  max_words: int = 14) -> FigureExplorer:
    """A slider over the merges: the words of ``text`` after the first k of ``merges`` (learned order).

    merge_pair: ``merge_pair(ids, pair, new_id)``, yours from the exercise; pre-tokenization is the
    course's ``pretokenize``. Shows at most ``max_words`` words.
    """
    from course_lib.tokenizer import pretokenize

    ordered = sorted(merges.items(), key=lambda item: item[1])
    vocab = {byte: bytes([byte]) for byte in range(256)}
    for (left, right), new_id in ordered:
        vocab[new_id] = vocab[left] + vocab[right]
    states = [[list(word.encode("utf-8")) for word in pretokenize(text)[:max_words]]]
    for pair, new_id in ordered:
        states.append([merge_pair(word, pair, new_id) for word in states[-1]])

    def draw(step: int) -> Figure:
        last = ordered[step - 1] if step else None
        return merge_figure(states[step], vocab, step, last)

    return FigureExplorer(draw, {"step": int_slider("merges applied", 0, len(ordered), min(len(ordered), 3))},
                          name="BPE merge stepper")
