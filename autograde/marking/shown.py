"""A TA's mark of a written answer as its student reads it, once the instructor has released the marks.

A mark is a ``cell`` event of the ledger (``course mark`` writes one; so do formgrader and ``course
adjust --cell``). One from ``course mark`` carries the rubric: the points given for each criterion,
an adjustment outside the rubric and a comment for the student. Shown, it is one line per criterion
("1/1  Drops gradients ... and optimizer state ..."), with the partial credit's words when a partial
level was given, the adjustment, and the comment. A mark without criteria (formgrader, ``course
adjust``) is its points and comment. Nothing here decides whether marks may be shown: the feedback
writer asks the ledger (``LedgerState.released``) first.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from autograde.knowledge.questions import WrittenQuestion
from autograde.ledger import Event

__all__ = ["CriterionLine", "ShownMark", "mark_html", "mark_text", "shown_mark"]


@dataclass(frozen=True)
class CriterionLine:
    text: str          # what the criterion asks for
    given: float
    points: float      # its full points
    partial: str = ""  # the partial credit's words, when the TA gave a partial level


@dataclass
class ShownMark:
    points: float
    max_points: float | None
    criteria: list[CriterionLine] = field(default_factory=list)
    adjustment: float = 0.0
    comment: str = ""


def shown_mark(question: WrittenQuestion | None, event: Event) -> ShownMark:
    """What the student reads of one mark (``question``: its rubric, or None if the file is gone)."""
    given = event.data.get("criteria") or {}
    mark = ShownMark(float(event.value or 0) + float(event.data.get("extra_credit") or 0),
                     question.points if question is not None else None,
                     adjustment=float(event.data.get("adjustment") or 0), comment=event.data.get("comment") or "")
    if not isinstance(given, dict):
        return mark
    criteria = question.criteria if question is not None else ()
    known = {criterion.id for criterion in criteria}
    for criterion in criteria:
        points = float(given.get(criterion.id, 0) or 0) if given else None
        if points is None:
            continue
        partial = next((credit.when for credit in criterion.partial if abs(credit.points - points) < 1e-9), "")
        mark.criteria.append(CriterionLine(criterion.text, points, criterion.points, partial))
    for criterion_id, points in sorted(given.items()):
        if criterion_id not in known and isinstance(points, (int, float)):
            mark.criteria.append(CriterionLine(f"({criterion_id})", float(points), float(points)))
    return mark


def mark_text(question: WrittenQuestion | None, event: Event) -> str:
    """The mark as plain text (nbgrader's comment on the cell, which formgrader shows)."""
    mark = shown_mark(question, event)
    lines = [f"{line.given:g}/{line.points:g}  {line.text}" + (f" (partly: {line.partial})" if line.partial else "")
             for line in mark.criteria]
    if mark.adjustment:
        lines.append(f"{mark.adjustment:+g}  outside the rubric")
    if mark.comment:
        lines.append(mark.comment)
    return "\n".join(lines)


def mark_html(question: WrittenQuestion | None, event: Event) -> str:
    """The mark as HTML for a feedback page: every word escaped (a comment may quote the answer)."""
    mark = shown_mark(question, event)
    total = f"{mark.points:g}" + (f" / {mark.max_points:g}" if mark.max_points is not None else "")
    rows = "".join(
        f"<tr><td style='text-align:right;white-space:nowrap'>{line.given:g} / {line.points:g}</td>"
        f"<td>{html.escape(line.text)}"
        + (f"<br><em>partly: {html.escape(line.partial)}</em>" if line.partial else "") + "</td></tr>"
        for line in mark.criteria)
    if mark.adjustment:
        rows += f"<tr><td style='text-align:right'>{mark.adjustment:+g}</td><td>outside the rubric</td></tr>"
    table = f"<table class='table table-condensed' style='margin:0.3em 0'>{rows}</table>" if rows else ""
    comment = (f"<p style='margin:0.3em 0;white-space:pre-wrap'><strong>Your TA:</strong> "
               f"{html.escape(mark.comment)}</p>") if mark.comment else ""
    return f"<p style='margin:0.3em 0'><strong>{total} points</strong></p>{table}{comment}"
