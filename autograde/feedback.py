"""Feedback pages and review notebooks that are safe to open: the student's content as text, the verdict from the grader.

A feedback page is nbconvert's rendering of the autograded notebook, and everything in that
notebook but the test cells and the instructor's text came from the student: outputs (HTML,
JavaScript, SVG, Markdown, an image's metadata), Markdown and raw cells, cell metadata. Two steps
make the page safe:

- ``SanitizeFeedback`` (an nbgrader preprocessor of ``generate_feedback``) keeps of each output only
  what renders as text or as a plain image (``text/plain``, base64 PNG and JPEG) and says what it
  left out; shows a Markdown or raw cell that is not one of the instructor's as a block of text;
  keeps of each cell's metadata only nbgrader's fields, checked (a grade id is a plain name);
- ``finish_page`` removes every ``<script>`` of the rendered page (the template's MathJax loader
  too: the page needs no JavaScript), adds a Content-Security-Policy that forbids scripts and any
  load from elsewhere, and puts the grader's verdict at the top: one line per test cell, from the
  grader's results, in a box no output can imitate (outputs render below it, inside the notebook).

The autograded notebooks that ``course grade`` leaves in ``OUT/autograded/`` for formgrader are
rendered too, by formgrader, in the instructor's own Jupyter server: nbgrader's template puts HTML
and JavaScript outputs, an image's ``width``, a Markdown cell's HTML and a cell's ``grade_id`` into
the page as they are, and a script there can use the instructor's session (Jupyter's API: files,
terminals). So they get the same treatment (``reviewable_notebook``): the instructor reviews the
student's work as text and plain images, and the test cells, hidden tests included, as graded.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import os
import re
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from course_lib.runner.bounded import clip

__all__ = ["CONTENT_SECURITY_POLICY", "SanitizeFeedback", "finish_page", "instructor_markdown", "reviewable_notebook",
           "sanitize_notebook", "sanitize_output"]

SAFE_MIME_TYPES = ("text/plain", "image/png", "image/jpeg")
SAFE_GRADE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
MAX_IMAGE_BYTES = 4 << 20
MAX_SOURCE_BYTES = 100 << 10   # a cell's source as the page shows it (grading used all of it)
CONTENT_SECURITY_POLICY = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
                           "base-uri 'none'; form-action 'none'")
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.IGNORECASE | re.DOTALL)
_STRAY_SCRIPT = re.compile(r"<script\b[^>]*/?>", re.IGNORECASE)
_EXTERNAL_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.IGNORECASE)


def _image(value: object) -> str | None:
    """A base64 image as nbformat stores it, or None if it is anything else."""
    text = "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value
    if not isinstance(text, str) or len(text) > MAX_IMAGE_BYTES or not _BASE64.match(text):
        return None
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def sanitize_output(output: dict) -> dict | None:
    """One nbformat output as the feedback page may show it (None: drop it)."""
    kind = output.get("output_type")
    if kind == "stream":
        text = output.get("text", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return nbformat.v4.new_output("stream", name=name, text=text)
    if kind == "error":
        traceback = [str(line) for line in output.get("traceback") or []]
        return nbformat.v4.new_output("error", ename=str(output.get("ename", "Error")),
                                      evalue=str(output.get("evalue", "")), traceback=traceback)
    if kind not in ("display_data", "execute_result"):
        return None
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept: dict[str, str] = {}
    for mime in SAFE_MIME_TYPES:
        if mime not in data:
            continue
        if mime == "text/plain":
            value = data[mime]
            kept[mime] = "".join(value) if isinstance(value, list) else str(value)
        else:
            image = _image(data[mime])
            if image is not None:
                kept[mime] = image
    left_out = sorted(str(mime)[:60] for mime in data if mime not in kept)
    if left_out and "text/plain" not in kept:
        kept["text/plain"] = f"[output of type {', '.join(left_out)} not shown in the feedback page]"
    if not kept:
        return None
    if kind == "execute_result":
        count = output.get("execution_count")
        return nbformat.v4.new_output("execute_result", data=kept,
                                      execution_count=count if isinstance(count, int) else None)
    return nbformat.v4.new_output("display_data", data=kept)


def _as_text_block(text: str, note: str) -> str:
    """Markdown that shows ``text`` literally (a fenced block longer than any run of backticks in it)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"*{note}*\n\n{fence}text\n{text}\n{fence}\n"


_NBGRADER_FIELDS = {"grade": bool, "solution": bool, "locked": bool, "task": bool, "points": float,
                    "schema_version": int}


def _clean_metadata(metadata: dict) -> dict:
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    if not isinstance(nbgrader, dict):
        return {}
    clean = {}
    for name, kind in _NBGRADER_FIELDS.items():
        if name in nbgrader:
            try:
                clean[name] = kind(nbgrader[name])
            except (TypeError, ValueError):
                continue
    grade_id = nbgrader.get("grade_id")
    if isinstance(grade_id, str) and SAFE_GRADE_ID.match(grade_id):
        clean["grade_id"] = grade_id
    elif clean.get("grade") or clean.get("solution") or clean.get("task"):
        clean = {}   # a graded cell with a made-up id: shown as an ordinary cell
    return {"nbgrader": clean} if clean else {}


_TIMESTAMP = re.compile(r"^[0-9T:.+Z-]{1,40}$")


def _is_timing(value: object) -> bool:
    """Whether ``value`` is a cell's ``execution`` metadata as the grader writes it (``execute._record_timing``)."""
    return isinstance(value, dict) and 0 < len(value) <= 2 and all(
        key in ("iopub.status.busy", "shell.execute_reply") and isinstance(time, str) and _TIMESTAMP.match(time)
        for key, time in value.items())


def _instructor_markdown(resources: dict) -> set[str]:
    """The Markdown of the instructor's notebook (the source nbgrader graded against), by text."""
    raw = os.environ.get("COURSE_GRADING_SETTINGS")
    info = resources.get("nbgrader", {}) if isinstance(resources, dict) else {}
    if not raw or not info.get("assignment") or not info.get("notebook"):
        return set()
    try:
        workspace = Path(json.loads(raw)["workspace"])
    except (KeyError, ValueError):
        return set()
    return instructor_markdown(workspace / "source" / info["assignment"] / f"{info['notebook']}.ipynb")


def instructor_markdown(source: Path) -> set[str]:
    """The Markdown cells of the instructor's notebook at ``source``, by text (none if it cannot be read)."""
    try:
        notebook = nbformat.read(source, as_version=4)
    except (OSError, ValueError):
        return set()
    return {cell.source for cell in notebook.cells if cell.cell_type == "markdown"}


def reviewable_notebook(data: bytes, instructor: set[str]) -> bytes:
    """An autograded notebook (its bytes) as ``OUT/autograded/`` keeps it for formgrader: sanitized like a
    feedback page (``sanitize_notebook``), test cells and hidden tests kept, and when each cell ran; a file
    that is no notebook becomes an empty one. A written answer's own words are kept beside their
    text-only rendering, in the cell's metadata (``ANSWER_KEY``), for ``course mark``: no notebook
    template renders metadata."""
    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except (UnicodeDecodeError, ValueError):
        notebook = nbformat.v4.new_notebook()
    return nbformat.writes(sanitize_notebook(notebook, instructor, keep_timing=True,
                                             keep_answers=True)).encode("utf-8")


ANSWER_KEY = "course_answer"   # cell metadata: {"source", "cell_type", "attachments"} of a written answer as written


def _written_answer(cell) -> dict:
    """What ``course mark`` needs of a written answer cell that the sanitizer shows as text."""
    attachments = cell.get("attachments")
    return {"source": clip(str(cell.source), MAX_SOURCE_BYTES, "text"), "cell_type": cell.cell_type,
            "attachments": len(attachments) if isinstance(attachments, dict) else 0}


class SanitizeFeedback(NbGraderPreprocessor):
    """Make an autograded notebook safe to render as a feedback page (see the module docstring)."""

    def preprocess(self, nb, resources):
        return sanitize_notebook(nb, _instructor_markdown(resources)), resources


def sanitize_notebook(nb, instructor: set[str], *, keep_timing: bool = False, keep_answers: bool = False):
    """``nb`` with only what renders as text or a plain image (module docstring); ``instructor``: the Markdown
    of the instructor's notebook, the only Markdown rendered as such. ``keep_timing``: keep when each cell
    ran (the grader's ``execution`` timestamps, plain text that no template renders). ``keep_answers``: keep
    each written answer's own words in its metadata (``ANSWER_KEY``), for the TAs' page."""
    cells = []
    for cell in nb.cells:
        metadata = _clean_metadata(cell.get("metadata", {}))
        timing = cell.get("metadata", {}).get("execution") if keep_timing else None
        if _is_timing(timing):
            metadata["execution"] = dict(timing)
        if cell.cell_type == "code":
            outputs = [clean for output in cell.get("outputs", []) if isinstance(output, dict)
                       for clean in [sanitize_output(output)] if clean is not None]
            count = cell.get("execution_count")
            new = nbformat.v4.new_code_cell(clip(str(cell.source), MAX_SOURCE_BYTES, "source"), metadata=metadata,
                                            outputs=outputs,
                                            execution_count=count if isinstance(count, int) else None)
        elif cell.cell_type == "markdown" and cell.source in instructor:
            new = nbformat.v4.new_markdown_cell(cell.source, metadata=metadata)
            if cell.get("attachments"):
                new.attachments = cell.attachments
        else:
            note = "text from the notebook, shown as written" if cell.cell_type == "markdown" \
                else f"a {cell.cell_type} cell, shown as written"
            nbgrader = metadata.get("nbgrader", {})
            if keep_answers and nbgrader.get("grade") and nbgrader.get("solution"):
                metadata[ANSWER_KEY] = _written_answer(cell)
            new = nbformat.v4.new_markdown_cell(_as_text_block(clip(str(cell.source), MAX_SOURCE_BYTES, "text"), note),
                                                metadata=metadata)
        if "id" in cell:
            new["id"] = cell["id"]
        cells.append(new)
    nb.cells = cells
    nb.metadata = {"language_info": {"name": "python"}}
    return nb


# ---- the rendered page --------------------------------------------------------------------------

_STATUS_COLOURS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e", "timeout": "#9a6700",
                   "kernel died": "#cf222e", "not run": "#6e7781", "partial": "#9a6700", "missing": "#6e7781",
                   "skipped: needs a GPU": "#6e7781", "awaiting a TA": "#0969da", "not attempted": "#6e7781"}


def _verdict(notebook) -> str:
    """The grader's verdict of one notebook as HTML: its score and one row per test cell."""
    rows = []
    for cell in notebook.cells:
        colour = _STATUS_COLOURS.get(cell.status, "#24292f")
        reason = html.escape(cell.reason or "")
        rows.append(f"<tr><td><code>{html.escape(cell.grade_id)}</code></td>"
                    f"<td style='text-align:right'>{cell.points:g} / {cell.max_points:g}</td>"
                    f"<td style='color:{colour};font-weight:bold'>{html.escape(cell.status)}</td>"
                    f"<td><pre style='margin:0;white-space:pre-wrap;border:0;background:none;padding:0'>"
                    f"{reason}</pre></td></tr>")
    return (
        "<div id='course-grader-verdict' style='border:3px solid #0969da;border-radius:6px;padding:0.8em;"
        "margin:1em auto;max-width:1140px;background:#f6f8fa;font-family:sans-serif'>"
        f"<h3 style='margin-top:0'>Grader's verdict: {notebook.score:g} / {notebook.max_score:g} points</h3>"
        + (f"<p style='margin:0 0 0.5em 0'>{_ta_points(notebook):g} of these points are for written answers, graded "
           "by your TA: their marks appear in a box above this one once your instructor releases them.</p>"
           if _ta_points(notebook) else "") +
        "<p style='margin:0 0 0.5em 0'>These lines come from the grader's results. Everything below is your "
        "notebook as graded: what your code printed appears there as text, never here.</p>"
        "<table class='table table-condensed' style='margin:0'><tr><th>test cell</th><th>points</th><th>result</th>"
        "<th>why</th></tr>" + "".join(rows) + "</table></div>")


def _ta_points(notebook) -> float:
    return sum(cell.max_points for cell in notebook.cells if getattr(cell, "written", False))


def finish_page(page: str, notebook=None) -> str:
    """The rendered feedback page with no script, a strict Content-Security-Policy, and the verdict on top."""
    page = _SCRIPT.sub("", page)
    page = _STRAY_SCRIPT.sub("", page)
    page = _EXTERNAL_LINK.sub("", page)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
    head = re.search(r"<head[^>]*>", page, re.IGNORECASE)
    page = page[:head.end()] + meta + page[head.end():] if head else meta + page
    if notebook is not None:
        body = re.search(r"<body[^>]*>", page, re.IGNORECASE)
        verdict = _verdict(notebook)
        page = page[:body.end()] + verdict + page[body.end():] if body else verdict + page
    return page


def adjustments_box(final, notebook_name: str, *, released: bool = True) -> str:
    """HTML of what the course staff changed in one student's lab (``final.FinalGrade``), as the feedback page
    of ``notebook_name`` shows it above the grader's verdict; "" when nothing changed. Each change shows its
    comment for the student (``course adjust --comment``); who made it and the staff's reason stay in the
    ledger. TA marks of written answers appear in ``written_box`` instead, and only once ``released``:
    until then the total shown leaves their points out."""
    rows = []
    unreleased = 0.0
    for change in final.adjustments:
        what = change["what"]
        if change.get("written"):
            if not released:
                unreleased += float(change["to"] or 0)
            continue
        if change["kind"] == "cell" and not what.startswith(f"{notebook_name}/"):
            continue
        if change["kind"] == "cell":
            text = f"{what.split('/', 1)[1]}: {change['from']:g} -> {change['to']:g} points"
        elif change["kind"] == "score":
            text = f"the lab's score set to {change['to']:g} (the autograder's cells: {change['from']:g})"
        elif change["kind"] == "penalty":
            text = f"a penalty of {-change['to']:g} points"
        else:
            text = f"your due time for this lab: {change.get('due', '')}"
        comment = change.get("comment") or ""
        rows.append(f"<li>{html.escape(text)}{': ' + html.escape(comment) if comment else ''}</li>")
    if final.late_penalty:
        late = final.hand_in or {}
        rows.append(f"<li>late penalty: -{final.late_penalty:g} points ({html.escape(late.get('status', ''))}, "
                    f"{html.escape(str(late.get('rule') or ''))})</li>")
    if not rows:
        return ""
    shown = max(0.0, round(final.score - unreleased, 4))
    pending = " (the marks of your written answers are not released yet)" if unreleased or final.awaiting else ""
    return ("<div id='course-staff-adjustments' style='border:3px solid #9a6700;border-radius:6px;padding:0.8em;"
            "margin:1em auto;max-width:1140px;background:#fff8c5;font-family:sans-serif'>"
            f"<h3 style='margin-top:0'>Your grade for {html.escape(final.lab)}: {shown:g} / {final.max_score:g} "
            f"points, after the course staff's changes{pending}</h3><ul style='margin:0'>" + "".join(rows) + "</ul>"
            "<p style='margin:0.5em 0 0 0'>The grader's verdict below is what the autograder found.</p></div>")


def written_box(notebook, marks: dict, *, released: bool, questions=None) -> str:
    """HTML of the written answers of one notebook (``results.NotebookResult``) for its feedback page; ""
    when it has none. Before the instructor releases the lab's marks: how many points the TA grades and
    that the marks appear once released, with no points, rubric or comment (``marks`` is not read).
    After: each answer's mark (``marking.shown.mark_html``: criteria ticked, comment), "not attempted"
    for a blank one, or "not graded yet". ``marks``: {grade_id: the ledger's cell event};
    ``questions``: the lab's ``knowledge.LabQuestions`` (the rubrics' words), or None."""
    from autograde.marking.shown import mark_html
    from autograde.results import MISSING, NOT_ATTEMPTED

    written = [cell for cell in notebook.cells if getattr(cell, "written", False)]
    if not written:
        return ""
    points = sum(cell.max_points for cell in written)
    parts = []
    if not released:
        parts.append(f"<p style='margin:0'>{points:g} points are graded by your TA; marks appear here once released.</p>")
    else:
        for cell in written:
            event = marks.get(cell.grade_id)
            question = questions.by_cell(notebook.name, cell.grade_id) if questions is not None else None
            if event is not None:
                body = mark_html(question, event)
            elif cell.status in (NOT_ATTEMPTED, MISSING):
                body = f"<p style='margin:0.3em 0'>0 / {cell.max_points:g} points: not attempted.</p>"
            else:
                body = f"<p style='margin:0.3em 0'>not graded yet ({cell.max_points:g} points).</p>"
            parts.append(f"<h4 style='margin:0.6em 0 0 0'><code>{html.escape(cell.grade_id)}</code></h4>{body}")
    return ("<div id='course-written-answers' style='border:3px solid #0969da;border-radius:6px;padding:0.8em;"
            "margin:1em auto;max-width:1140px;background:#ddf4ff;font-family:sans-serif'>"
            "<h3 style='margin-top:0'>Your written answers, graded by your TA</h3>" + "".join(parts) + "</div>")
