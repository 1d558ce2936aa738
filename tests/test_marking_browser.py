"""`course mark` in a real browser (Playwright, the system Chromium): a TA grades two questions for
three students with the keyboard only, while a second TA is kept off the answer the first one holds;
then `course export` and the feedback pages, once the instructor releases the marks, show them.

The class is synthetic (tests/marking_fixture.py): graded notebooks, result files and feedback pages
written by the test, no grading run. `course mark` runs as a TA starts it, on a free loopback port;
the test reads the address it prints. Along the way: an answer that pastes a script and an image tag
shows as text and runs nothing, the page makes no request outside the server, and the console stays
free of errors. Before the marks, the export leaves the answered students' lab empty (written answers
await a TA); after them it carries the TA's points; `course mark --release` puts the criteria met and
the comments into the feedback pages, which a browser shows as text.
Skipped, with the reason, where Playwright or Chromium is missing.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograde.marking.ledger_marks import LedgerMarks
from tests.marking_fixture import LAB, NOTEBOOK, write_class, write_questions, write_results

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or next(
    (path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(path).exists()), None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--disable-default-apps", "--disable-features=Translate,OptimizationHints,MediaRouter"]
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - the test extras install it
    sync_playwright = None

if sync_playwright is None:
    pytest.skip("Playwright is not installed (pip install -e '.[test]', as make setup does)", allow_module_level=True)
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (make setup installs the Debian package chromium where it can)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def marking(tmp_path_factory):
    """`course mark` on a class of four (three answered both questions, one left both blank)."""
    folder = tmp_path_factory.mktemp("marking")
    questions = write_questions(folder / "questions").parent
    answers = {
        "alice": {"written_cache": "The keys and values of old tokens never change, so the engine keeps them; "
                                   "without them every step recomputes the whole prefix.",
                  "written_batching": "Every weight read serves all sequences, and decode is memory-bound."},
        "bruno": {"written_cache": HOSTILE, "written_batching": "It is faster."},
        "chen": {"written_cache": "To save time.", "written_batching": "The weights are read once for the batch."},
        "dana": {},
    }
    out = write_class(folder / "out", answers)
    write_results(out, answers, questions / "solutions")
    before = _export(out)
    assert before == {"alice": "", "bruno": "", "chen": "", "dana": "1"}, "written answers await a TA: no grade yet"
    process = subprocess.Popen(
        [sys.executable, "-m", "autograde.cli", "mark", str(out), "--lab", LAB, "--questions", str(questions),
         "--solutions", str(questions / "solutions"), "--grader", "Ann", "--lease", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url, lines, deadline = None, [], time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("open:"):
            url = line.split(None, 1)[1].strip()
    try:
        assert url, "course mark printed no address:\n" + "".join(lines)
        assert "6 answers await a mark" in "".join(lines)
        yield url, out, questions
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            tail = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            tail = process.communicate(timeout=10)[0]
        assert process.returncode == 0, tail
        assert "marks kept" in tail


def _course(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def _export(out: Path) -> dict[str, str]:
    """The Canvas file's cell of each student (its SIS Login ID: the student id)."""
    target = out.parent / "canvas.csv"
    run = _course("export", out, "--format", "canvas", "--out", target)
    assert run.returncode == 0, run.stderr
    return {row[3]: row[5] for row in list(csv.reader(io.StringIO(target.read_text())))[2:]}


@pytest.fixture(scope="module")
def browser(marking):
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _watched_page(context, base: str, problems: list[str], expected: str | None = None):
    """A page whose console errors (but ``expected``'s), uncaught errors and requests outside the
    server go to ``problems``."""
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type == "error" and not (expected and expected in message.text) else None)
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    page.on("request", lambda request: None if request.url.startswith(base)
            else problems.append(f"request outside the server: {request.url}"))
    return page


def _current(page):
    return page.locator(".answer.current")


def _saved(page, label: str):
    expect(page.locator("#status")).to_have_text(re.compile(rf"^Saved [0-9.]+ / [0-9.]+ for {re.escape(label)}\."))


def test_a_ta_grades_two_questions_for_three_students_then_the_export_and_the_released_feedback_show_it(
        marking, browser):
    url, out, questions = marking
    base = url.split("/#")[0]
    problems: list[str] = []
    ann_context = browser.new_context(viewport={"width": 1300, "height": 900})
    ann = _watched_page(ann_context, base, problems)
    ann.goto(url)

    expect(ann.locator("#workspace")).to_be_visible()
    expect(ann.locator("#who")).to_have_text("grading as Ann")
    assert "#token" not in ann.url, "the key stays in the address bar"
    expect(ann.locator("#question-title")).to_have_text("01_questions/written_cache · 3 points")
    expect(ann.locator("#progress")).to_have_text("0 of 4 marked · 3 awaiting · 1 blank · 0 missing")
    expect(ann.locator(".answer[data-status='blank'] .text")).to_have_text(re.compile("^\\(blank"))

    # Question 1, alice: both criteria in full (key 1 twice would give the partial credit).
    expect(_current(ann).locator(".label")).to_have_text("alice")
    ann.keyboard.press("1")
    ann.keyboard.press("2")
    expect(ann.locator("#total")).to_have_text("Total: 3 / 3 (not saved)")
    ann.keyboard.press("Enter")
    _saved(ann, "alice")

    # The page moved on to bruno, whose answer pastes a script and an image: shown as text, run never.
    expect(_current(ann).locator(".label")).to_have_text("bruno")
    expect(_current(ann).locator(".text")).to_have_text(HOSTILE)
    assert ann.evaluate("() => window.pwned") is None
    assert ann.locator("#answers img, #answers script").count() == 0

    # A second TA opens the same question: Ann holds bruno, so Bob starts on chen, and when he steps
    # back to bruno he is told who has it and cannot mark it.
    bob_context = browser.new_context(viewport={"width": 1300, "height": 900})
    bob_context.add_init_script("localStorage.setItem('course-mark-grader', 'Bob')")
    # (Chromium logs the claim's answer, 409 Conflict, as a failed request: that one is expected.)
    bob = _watched_page(bob_context, base, problems, expected="status of 409 (Conflict)")
    bob.goto(url)
    expect(bob.locator("#who")).to_have_text("grading as Bob")
    expect(_current(bob).locator(".label")).to_have_text("chen")
    bob.keyboard.press("k")
    expect(_current(bob).locator(".label")).to_have_text("bruno")
    expect(bob.locator("#status")).to_have_text(re.compile("Ann is grading this answer"))
    expect(bob.locator("#save")).to_be_disabled()
    bob.keyboard.press("1")
    expect(bob.locator("#total")).to_have_text("Total: 0 / 3")
    bob_context.close()

    # Ann gives bruno the partial credit of criterion 1 (full, then partial) and a comment.
    ann.keyboard.press("1")
    ann.keyboard.press("1")
    ann.keyboard.press("c")
    ann.keyboard.type("Only markup, no reason: see the model answer.")
    ann.keyboard.press("Escape")
    expect(ann.locator("#total")).to_have_text("Total: 1 / 3 (not saved)")
    ann.keyboard.press("Enter")
    _saved(ann, "bruno")

    # chen: "to save time" is criterion 1's partial case.
    expect(_current(ann).locator(".label")).to_have_text("chen")
    ann.keyboard.press("1")
    ann.keyboard.press("1")
    ann.keyboard.press("Enter")
    expect(ann.locator("#status")).to_have_text(re.compile("Every answer to 01_questions/written_cache has a mark"))
    expect(ann.locator("#progress")).to_have_text("3 of 4 marked · 0 awaiting · 1 blank · 0 missing")

    # Question 2, by key: ] opens it on the first answer awaiting a mark.
    ann.keyboard.press("]")
    expect(ann.locator("#question-title")).to_have_text("01_questions/written_batching · 2 points")
    expect(_current(ann).locator(".label")).to_have_text("alice")
    for keys, label in ((["1", "2"], "alice"), ([], "bruno"), (["1"], "chen")):
        expect(_current(ann).locator(".label")).to_have_text(label)
        for key in keys:
            ann.keyboard.press(key)
        if label == "bruno":
            ann.keyboard.press("c")
            ann.keyboard.type("Faster how? Say which reads the batch shares.")
            ann.keyboard.press("Escape")
        ann.keyboard.press("Enter")
    expect(ann.locator("#status")).to_have_text(re.compile("Every answer to 01_questions/written_batching has a mark"))

    # j/k move between answers; the help opens with ? and closes with Escape.
    ann.keyboard.press("k")
    expect(_current(ann).locator(".label")).to_have_text("bruno")
    ann.keyboard.press("?")
    expect(ann.locator("#help")).to_be_visible()
    ann.keyboard.press("Escape")
    expect(ann.locator("#help")).to_be_hidden()

    assert not problems, "\n".join(problems)
    marks = {(m.grade_id, m.student): (m.points, m.grader, m.comment) for m in LedgerMarks(out).get_marks(LAB)}
    assert marks == {
        ("written_cache", "alice"): (3.0, "Ann", ""),
        ("written_cache", "bruno"): (1.0, "Ann", "Only markup, no reason: see the model answer."),
        ("written_cache", "chen"): (1.0, "Ann", ""),
        ("written_batching", "alice"): (2.0, "Ann", ""),
        ("written_batching", "bruno"): (0.0, "Ann", "Faster how? Say which reads the batch shares."),
        ("written_batching", "chen"): (1.0, "Ann", ""),
    }

    # The export carries the TA's points at once (a test cell's 1 point + the two marks); dana's blank answers: 0.
    assert _export(out) == {"alice": "6", "bruno": "2", "chen": "3", "dana": "1"}

    # Released, the feedback pages show the criteria met and the TA's comments, as text.
    released = _course("mark", out, "--lab", LAB, "--questions", questions, "--solutions", questions / "solutions",
                       "--release")
    assert released.returncode == 0 and "rebuilt" in released.stdout, released.stdout + released.stderr
    page = ann_context.new_page()
    page.goto((out / "feedback" / "bruno" / LAB / f"{NOTEBOOK}.html").as_uri())
    box = page.locator("#course-written-answers")
    expect(box).to_contain_text("Only markup, no reason: see the model answer.")
    expect(box).to_contain_text("Faster how? Say which reads the batch shares.")
    expect(box).to_contain_text("1 / 2Earlier keys and values never change, so they can be kept.")
    expect(box).to_contain_text("partly: says 'to save time' without what is kept")
    expect(box).to_contain_text("1 / 3 points")
    assert page.evaluate("() => window.pwned") is None
    ann_context.close()
