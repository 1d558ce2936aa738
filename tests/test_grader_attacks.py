"""The demo's attacks on the grader itself, graded on the real labs beside a correct student (make test-full).

One ``course grade`` run holds the hostile demo students (``autograde/demo/<lab>/attack-*.py`` that break
the grader rather than the checks: a stall, floods, hogs, a fork bomb, borrowed platform helpers...) and
the ``correct`` student's copy of each notebook they touch. Each attack must score exactly its spec's
EXPECTED, the correct student full marks, the whole run must finish in bounded time, and nothing an
attack does may leak into its feedback: not the hidden tests' inputs, not a script, not a flood.
The same attacks on the tiny fixture lab (cheap enough for CI) are in test_grading_rules.py.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograde.demos import load_demo_students
from autograde.preprocessors import HIDDEN_REGION

pytestmark = [pytest.mark.slow, pytest.mark.full]
ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "autograde" / "demo"
SUBMISSIONS = ROOT / "autograde" / "demo_submissions"
GRADER_ATTACKS = {
    "lab01-text-to-tensors": ["attack-borrow-platform-helpers", "attack-tokenizer-guard", "attack-stall",
                              "attack-output-flood", "attack-print-hidden-inputs", "attack-feedback-script",
                              "attack-print-hidden-inputs-later", "attack-fish-expected-values",
                              "attack-module-by-name", "attack-memory-hog", "attack-disk-filler",
                              "attack-process-storm", "attack-forged-timestamp", "attack-hash-bomb",
                              "attack-forged-kernel-died"],
    "lab02-prefill-vs-decode": ["attack-lent-model-overload", "attack-huge-range"],
    "lab05-serving": ["attack-relay-symlink"],
}
RUN_LIMIT_S = 40 * 60   # a bound no attack may stretch: each is stopped at its cell's limit or sooner


def _literals(source: str) -> set[str]:
    """Numbers of six digits or more and strings of five characters or more written in ``source`` (shorter
    numbers, 4096 or 8192, show up in any printed config)."""
    found = set()
    for line in source.splitlines():
        try:
            tree = ast.parse(line.strip())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) >= 100_000:
                found.add(str(node.value))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 5:
                found.add(node.value)
    return found


def hidden_inputs(lab: str, notebook: str) -> set[str]:
    """Literals of a notebook's hidden tests that no code of its release writes: what must never reach a student."""
    source = json.loads((ROOT / "solutions" / lab / f"{notebook}.ipynb").read_text())
    release = json.loads((ROOT / "labs" / lab / f"{notebook}.ipynb").read_text())
    hidden = {literal for cell in source["cells"] for region in HIDDEN_REGION.findall("".join(cell["source"]))
              for literal in _literals(region)}
    visible = {literal for cell in release["cells"] if cell["cell_type"] == "code"
               for literal in _literals("".join(cell["source"]))}
    return hidden - visible


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grader-attacks")
    touched: dict[str, set[str]] = {}
    for lab, students in GRADER_ATTACKS.items():
        specs = {student.name: student for student in load_demo_students(SPECS / lab)}
        for name in students:
            shutil.copytree(SUBMISSIONS / name / lab, root / "submissions" / name / lab)
            touched.setdefault(lab, set()).update(specs[name].expected)
        for notebook in touched[lab]:
            target = root / "submissions" / "correct" / lab
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(SUBMISSIONS / "correct" / lab / f"{notebook}.ipynb", target)
    sockets_before = {path for folder in (Path("/etc"), Path("/tmp")) for path in folder.glob("*.sock")}
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "autograde.cli", "grade", str(root / "submissions"), "--out",
                          str(root / "out"), "--jobs", "2", "--demo-specs", str(SPECS)],
                         capture_output=True, text=True, timeout=RUN_LIMIT_S)
    elapsed = time.monotonic() - started
    sockets_after = {path for folder in (Path("/etc"), Path("/tmp")) for path in folder.glob("*.sock")}
    return root, run, elapsed, touched, sockets_after - sockets_before


def test_every_attack_scores_its_spec_and_the_correct_student_full_marks(graded):
    _, run, elapsed, touched, _ = graded
    rows = [line.split() for line in run.stdout.splitlines() if "MISMATCH" in line]
    wrong = [row for row in rows if row[1] != "correct" or row[2] in touched.get(row[0], ())]
    assert not wrong, run.stdout[-4000:]   # correct hands in only the notebooks the attacks touch
    assert "correct" in run.stdout and elapsed < RUN_LIMIT_S
    report = json.loads((graded[0] / "out" / "report.json").read_text())
    for entry in report["submissions"]:
        if entry["student"] == "correct":
            for notebook in entry["notebooks"]:
                if notebook["name"] in touched[entry["lab"]]:
                    assert notebook["score"] == notebook["max_score"], (entry["lab"], notebook["name"])


@pytest.mark.parametrize("student, notebook", [
    ("attack-print-hidden-inputs", "02_training_vs_inference"),
    ("attack-print-hidden-inputs-later", "02_training_vs_inference"),
    ("attack-fish-expected-values", "02_training_vs_inference"),
    ("attack-forged-kernel-died", "01_tokenization"),
])
def test_no_hidden_input_reaches_a_feedback_page_or_the_outputs_of_a_graded_notebook(graded, student, notebook):
    """One attacker prints its arguments while the checks run; another keeps them and prints them in the
    next answer cell; another raises them in an error dressed as the grader's own KernelDied (which the old
    grader trusted with 42 KB of them). No output, page or report holds a hidden test's input."""
    root = graded[0]
    lab = "lab01-text-to-tensors"
    secrets = hidden_inputs(lab, notebook)
    assert secrets, "the hidden tests have inputs to look for"
    page = (root / "out" / "feedback" / student / lab / f"{notebook}.html").read_text()
    graded_notebook = json.loads((root / "out" / "autograded" / student / lab / f"{notebook}.ipynb").read_text())
    outputs = json.dumps([cell.get("outputs", []) for cell in graded_notebook["cells"]])
    report = (root / "out" / "report.json").read_text()
    assert "hidden checks have called your code earlier in this notebook" in page
    for secret in secrets:
        assert secret not in outputs, f"hidden input {secret!r} leaked into a cell's output"
        assert json.dumps(secret)[1:-1] not in report, f"hidden input {secret!r} leaked into report.json"


def test_a_huge_range_costs_its_cell_and_says_why(graded):
    """static_batching returns range(40_000_000): the old grader's list() of it took 1.5 GB of its memory."""
    report = json.loads((graded[0] / "out" / "report.json").read_text())
    entry = next(entry for entry in report["submissions"]
                 if entry["student"] == "attack-huge-range" and entry["lab"] == "lab02-prefill-vs-decode")
    reasons = {lost["cell"]: lost["reason"] or "" for lost in entry["lost_points"]}
    assert set(reasons) == {"test_static_batching"}
    assert "range of 40,000,000 items" in reasons["test_static_batching"]


def test_feedback_pages_are_safe_and_small(graded):
    from tests.test_grading_bounds import unsafe_tags

    root = graded[0]
    for page_path in (root / "out" / "feedback").rglob("*.html"):
        page = page_path.read_text()
        assert unsafe_tags(page) == [], page_path
        assert len(page) < 4 << 20, page_path
    assert (root / "out" / "report.json").stat().st_size < 2 << 20
    assert max(path.stat().st_size for path in (root / "out" / "results").rglob("*.json")) < 500_000


def test_the_relay_link_created_nothing_outside_and_no_kernel_outlived_the_run(graded):
    new_sockets = graded[4]
    assert new_sockets == set(), new_sockets
    leftover = subprocess.run(["ps", "-eo", "uid="], capture_output=True, text=True).stdout.split()
    assert not any(int(uid) >= 1 << 30 for uid in leftover if uid.isdigit()), "a kernel's process is still running"


def test_limits_are_named_where_they_were_hit(graded):
    report = json.loads((graded[0] / "out" / "report.json").read_text())
    reasons = {entry["student"]: " ".join(lost["reason"] or "" for lost in entry["lost_points"])
               for entry in report["submissions"] if entry["lab"] == "lab01-text-to-tensors"}
    assert "memory limit of 4 GB reached" in reasons["attack-memory-hog"]
    assert "process limit of 512 reached" in reasons["attack-process-storm"]
    assert re.search(r"stopped reading|did not stop", reasons["attack-stall"])
