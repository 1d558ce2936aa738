"""What the grader keeps of a hostile student's output, and how it reads its limits: fast, no kernel.

The kernel-level negative controls (a memory hog, a process storm, a disk filler, a stall) are in
test_grading_limits.py.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from autograde.feedback import CONTENT_SECURITY_POLICY, SanitizeFeedback, finish_page, sanitize_output
from autograde.results import CellResult, LabResult, NotebookResult
from course_lib.runner.bounded import (HIDDEN_OUTPUT_NOTE, MESSAGE_BYTES, CellOutputs, TextKeeper, bound_outputs,
                                       clip)
from course_lib.runner.limits import GiB, KernelLimits, LimitsError, MiB, parse_limits


# ---- limits ---------------------------------------------------------------------------------------


def test_default_limits_follow_autograder_io_and_fit_a_laptop():
    limits = KernelLimits()
    assert limits.memory == 4 * GiB and limits.processes == 512
    assert "memory 4 GB" in limits.summary() and "512 processes" in limits.summary()
    # A submission's job is bounded by documented numbers, whatever its cells.
    assert limits.max_job_seconds(notebooks=5) <= 100 * 60 + 60
    assert limits.job_seconds([10_000] * 5, 120) <= limits.max_job_seconds(5)
    assert limits.job_seconds([3], 120) < limits.job_seconds([30], 120)


def test_limits_are_read_from_pairs_and_files(tmp_path):
    limits = parse_limits(["memory=2GB,processes=256", "cpu=30m", "notebook=600"])
    assert (limits.memory, limits.processes, limits.cpu, limits.notebook) == (2 * GiB, 256, 1800, 600)
    config = tmp_path / "limits.conf"
    config.write_text("# a class on small machines\nmemory = 1536MB\ndisk = 512MB  # scratch\n")
    limits = parse_limits([str(config)])
    assert limits.memory == 1536 * MiB and limits.disk == 512 * MiB and limits.processes == 512
    assert KernelLimits.from_dict(json.loads(limits.to_json())) == limits
    grader = parse_limits(["grader_memory=12GB,grader_cpu=20m"])   # the grading process's own
    assert (grader.grader_memory, grader.grader_cpu) == (12 * GiB, 1200)
    assert grader.grader_summary() == "memory 12 GB, CPU 20 min per test cell"


@pytest.mark.parametrize("spec,words", [
    ("memory=lots", "memory"), ("colour=blue", "unknown limit 'colour'"), ("processes=1", "processes"),
    ("stream=4MB", "cannot exceed output"), ("no-such-file.conf", "neither key=value"),
    ("grader_cpu=5", "grader_cpu must be a whole number >= 10 s"), ("grader_memory=a lot", "bytes such as 8GB"),
])
def test_a_bad_limit_names_the_key_and_what_is_allowed(spec, words):
    with pytest.raises(LimitsError, match=words):
        parse_limits([spec])


def test_the_grade_command_refuses_a_bad_limit_and_prints_the_limits(tmp_path, capsys):
    from autograde.cli import main

    assert main(["grade", str(tmp_path), "--limits", "memory=nope"]) == 2
    assert "--limits memory='nope'" in capsys.readouterr().err


# ---- output in bytes ------------------------------------------------------------------------------


def test_printed_text_keeps_head_and_tail_and_says_how_much_was_cut():
    keeper = TextKeeper(1000)
    keeper.write("HEAD" + "x" * 5000)
    for _ in range(1000):
        keeper.write("y" * 100)
    keeper.write("TAIL")
    text = keeper.text()
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert len(text.encode()) < 1200 and "bytes of printed output cut here" in text


def test_a_cell_keeps_its_bytes_within_the_limits_whatever_the_kernel_sends():
    flood = [{"output_type": "stream", "name": "stdout", "text": "a" * (150 << 20)},
             {"output_type": "display_data", "data": {"image/png": "A" * (60 << 20), "text/plain": "<Figure>"}},
             {"output_type": "error", "ename": "E" * 100_000, "evalue": "v" * (30 << 20), "traceback": ["t" * 1000] * 10_000},
             {"output_type": "evil", "data": {}}, "not a dict", {"output_type": "stream", "name": "/etc/passwd",
                                                                "text": ["a", "b"]}]
    outputs = bound_outputs(flood, 2 * MiB, 100 << 10)
    size = len(json.dumps(outputs))
    assert size < 3 * MiB, size
    kinds = [o["output_type"] for o in outputs]
    assert kinds.count("error") == 1 and kinds[-1] == "error"
    assert any("removed: a cell keeps at most 2 MB" in o.get("text", "") for o in outputs)
    assert all(o.get("name") in (None, "stdout", "stderr") for o in outputs)


def test_clip_cuts_the_middle_of_a_long_message():
    message = clip("start" + "m" * (30 << 20) + "end", MESSAGE_BYTES)
    assert message.startswith("start") and message.endswith("end") and len(message) < MESSAGE_BYTES + 200


def test_clear_output_and_many_small_outputs_stay_bounded():
    cell = CellOutputs(64 << 10, 8 << 10)
    for index in range(10_000):
        cell.add({"output_type": "display_data", "data": {"text/plain": f"frame {index}"}})
        cell.add_stream("stdout", "progress\r")
    assert len(cell.result()) <= CellOutputs.MAX_OUTPUTS + 2
    cell.clear()
    assert cell.result() == []


def test_result_files_and_report_hold_clipped_reasons():
    from autograde.report import report_json

    result = LabResult("alice", "lab01", [NotebookResult("ch1", "graded", cells=[
        CellResult("t1", 0, 1, "error", "r" * (30 << 20))])], problems=["p" * (5 << 20)] * 500)
    again = LabResult.from_dict(json.loads(json.dumps(result.as_dict())))
    assert len(again.notebooks[0].cells[0].reason) < 5000
    from autograde.final import final_grades
    from autograde.ledger import LedgerState
    from autograde.store import StoredResult

    stored = [StoredResult(again, {}, True)]
    report = report_json(stored, final_grades(stored, LedgerState()), ["u" * (5 << 20)], device="cpu", timeout=120,
                         limits=KernelLimits().as_dict())
    assert len(report) < 300_000
    assert json.loads(report)["kernel_limits"]["memory"] == 4 * GiB


# ---- hidden checks ------------------------------------------------------------------------------------


def test_hidden_regions_become_switches_at_their_indentation():
    from autograde.testcells import HIDDEN_SWITCH, mark_hidden_regions

    source = "check(1)\n### BEGIN HIDDEN TESTS\ncheck(2)\nfor x in [3]:\n    ### BEGIN HIDDEN TESTS\n    check(x)\n" \
             "    ### END HIDDEN TESTS\n### END HIDDEN TESTS\n"
    marked, found = mark_hidden_regions(source)
    assert found and marked.count(f"{HIDDEN_SWITCH}(True)") == 2 and "    __course" in marked
    odd, found = mark_hidden_regions("if x:\n  pass\n        ### BEGIN HIDDEN TESTS\n  check(2)\n")
    assert found and odd.startswith(f"{HIDDEN_SWITCH}(True)"), "a marker that cannot be a statement hides it all"
    assert mark_hidden_regions("check(1)\n") == ("check(1)\n", False)


def test_a_failing_hidden_check_does_not_repeat_what_the_student_returned():
    from course_lib.checks import CheckFailed, _HIDDEN_CHECK, call_student, fail

    token = _HIDDEN_CHECK.set(True)
    try:
        with pytest.raises(CheckFailed) as failed:
            fail("encode(<hidden>) is wrong", expected=[1, 2], got="SECRET-HIDDEN-INPUT")
        assert "SECRET-HIDDEN-INPUT" not in str(failed.value) and "[1, 2]" in str(failed.value)

        def leaky(text):
            raise ValueError(f"I was given {text}")

        with pytest.raises(CheckFailed) as crashed:
            call_student(leaky, "encode", "SECRET-HIDDEN-INPUT", show_args=False)
        assert "SECRET-HIDDEN-INPUT" not in str(crashed.value) and "ValueError" in str(crashed.value)
    finally:
        _HIDDEN_CHECK.reset(token)
    with pytest.raises(CheckFailed, match="VISIBLE"):
        fail("visible", expected=1, got="VISIBLE")


# ---- feedback pages ---------------------------------------------------------------------------------


def _student_notebook():
    code = nbformat.v4.new_code_cell("show()", outputs=[
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>steal()</script><div class='alert'>All tests passed: 77/77</div>",
            "application/javascript": "alert(1)", "image/svg+xml": "<svg onload='alert(1)'/>"}),
        nbformat.v4.new_output("display_data", data={"image/png": "not base64 <img src=x onerror=alert(1)>"}),
        nbformat.v4.new_output("stream", name="stdout", text="<script>alert('printed')</script>"),
    ])
    code.metadata = {"nbgrader": {"solution": True, "grade": False, "grade_id": "x\" onmouseover=\"alert(1)",
                                  "comment": "<script>alert(1)</script>"}, "tags": ["<img src=x>"]}
    markdown = nbformat.v4.new_markdown_cell("# Mine\n<script>alert('md')</script><img src=x onerror=alert(1)>")
    raw = nbformat.v4.new_raw_cell("<script>alert('raw')</script>", metadata={"format": "text/html"})
    return nbformat.v4.new_notebook(cells=[code, markdown, raw])


def unsafe_tags(page: str) -> list[str]:
    """The HTML tags of ``page`` (not escaped text) that could run code or load from elsewhere."""
    import re

    tags = re.findall(r"<[a-zA-Z][^>]*>", page)
    return [tag for tag in tags if re.match(r"<(script|svg|iframe|object|embed|base|form)\b", tag, re.I)
            or re.search(r"\son[a-z]+\s*=", tag, re.I) or re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", tag, re.I)]


def test_feedback_keeps_only_text_and_plain_images_of_the_students_content():
    notebook, _ = SanitizeFeedback().preprocess(_student_notebook(), {})
    code, markdown, raw = notebook.cells
    first = code.outputs[0]
    assert set(first.data) == {"text/plain"} and "not shown in the feedback page" in first.data["text/plain"]
    assert set(code.outputs[1].data) == {"text/plain"}, "an image that is not base64 is not an image"
    assert code.metadata == {}, "a graded cell with a made-up id is an ordinary cell"
    assert markdown.source.startswith("*text from the notebook") and "```text" in markdown.source
    assert raw.cell_type == "markdown" and "<script>" in raw.source and raw.source.count("```") == 2


def test_the_rendered_page_has_no_script_a_strict_policy_and_the_graders_verdict():
    from nbconvert import HTMLExporter

    notebook, _ = SanitizeFeedback().preprocess(_student_notebook(), {})
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(notebook)
    verdict = NotebookResult("ch1", "graded", cells=[CellResult("test_one", 0, 2, "failed", "<b>expected</b> 1")])
    finished = finish_page(page, verdict)
    assert unsafe_tags(finished) == []
    assert CONTENT_SECURITY_POLICY in finished
    assert finished.index("course-grader-verdict") < finished.index("Mine")
    assert "&lt;b&gt;expected&lt;/b&gt;" in finished and "Grader's verdict: 0 / 2" in finished
    assert "All tests passed: 77/77" not in finished, "the student's HTML banner is not rendered"


def test_the_notebooks_left_for_formgrader_render_no_script_of_the_students():
    """Formgrader renders `OUT/autograded/` in the instructor's Jupyter server with nbgrader's template, which
    puts HTML and JavaScript outputs, an image's width, a Markdown cell's HTML and a grade_id into the page as
    they are: the notebook the worker hands over is sanitized like the feedback, test cells kept."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    from autograde.feedback import reviewable_notebook

    notebook = _student_notebook()
    notebook.cells[0].outputs.append(nbformat.v4.new_output(
        "display_data", data={"image/png": "iVBORw0KGgo=", "application/javascript": "alert('js')"},
        metadata={"image/png": {"width": "1 onerror=alert('width')"}}))
    notebook.cells[0].metadata["execution"] = {"iopub.status.busy": "2026-01-01T10:00:00.000001Z"}
    test_cell = nbformat.v4.new_code_cell("assert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(41) == 42\n"
                                          "### END HIDDEN TESTS", metadata={"nbgrader": {
                                              "grade": True, "grade_id": "test_f", "points": 2, "locked": True}})
    notebook.cells.append(test_cell)
    config = Config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    resources = {"assignment_id": "lab", "notebook_id": "ch1", "submission_id": "s", "index": 0, "total": 1,
                 "base_url": "", "student": "s", "last_name": None, "first_name": None, "notebook_path": "/ch1"}
    before, _ = HTMLExporter(config=config).from_notebook_node(notebook, resources=dict(resources))
    assert any("onerror" in tag for tag in unsafe_tags(before)), "nbgrader's own rendering runs them"
    reviewed = nbformat.reads(reviewable_notebook(nbformat.writes(notebook).encode(), set()).decode(), as_version=4)
    page, _ = HTMLExporter(config=config).from_notebook_node(reviewed, resources=dict(resources))
    template, _ = HTMLExporter(config=config).from_notebook_node(nbformat.v4.new_notebook(), resources=dict(resources))
    student_tags = set(unsafe_tags(page)) - set(unsafe_tags(template))   # formgrader's own scripts stay
    assert student_tags == set(), student_tags
    assert "alert('js')" not in page and "Mine" in page
    assert "assert f(41) == 42" in reviewed.cells[-1].source and reviewed.cells[-1].metadata["nbgrader"]["grade"]
    assert reviewed.cells[0].metadata["execution"] == notebook.cells[0].metadata["execution"]
    assert reviewable_notebook(b"not a notebook", set()).startswith(b"{")


def test_an_output_a_check_printed_keeps_its_text():
    kept = sanitize_output({"output_type": "execute_result", "execution_count": 3,
                            "data": {"text/plain": "42", "image/png": "iVBORw0KGgo="}})
    assert kept["data"] == {"text/plain": "42", "image/png": "iVBORw0KGgo="} and kept["execution_count"] == 3


# ---- timestamp.txt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,recorded,problem", [
    ("2026-03-01 12:00:00.000000 UTC\n", "2026-03-01 12:00:00.000000 UTC", None),
    ("not a time", "", "not a timestamp"),
    ("2026-03-01 12:00:00 UTC\n2020-01-01 00:00:00 UTC", "", "not one timestamp"),
    ("9999-01-01 00:00:00 UTC", "", "not a possible hand-in time"),
    ("1970-01-01 00:00:00 UTC", "", "not a possible hand-in time"),
    ("2026-03-01 " + "x" * 5000, "", "not one timestamp"),
    ("2026-03-01T12:00:00+01:00", "2026-03-01 11:00:00.000000 UTC", None),      # ISO 8601 with its zone
    # dateutil read these as dates that depend on the day the grader runs, or with the zone backwards:
    ("12", "", "not a timestamp"),                                                # the 12th of this month
    ("Jan", "", "not a timestamp"),                                               # today's day in January
    ("2026-03-01 12:00:00 UTC+14", "", "not a timestamp"),                        # 14 hours west, not east
    ("\u0662\u0660\u0662\u0666-03-01 12:00", "", "not a timestamp"),              # digits that are not ASCII
])
def test_timestamp_txt_is_parsed_and_checked(tmp_path, text, recorded, problem):
    from autograde.due import read_timestamp

    path = tmp_path / "timestamp.txt"
    path.write_text(text)
    stamp, found = read_timestamp(path)
    assert stamp == recorded
    assert (found is None) if problem is None else (problem in found)


# ---- cgroups v2 (where a machine delegates one; this one may not: the files are checked) -------------


def test_a_kernel_cgroup_gets_its_limits_and_joins_before_the_kernel_runs(tmp_path, monkeypatch):
    import subprocess

    from course_lib.runner.watchdog import CGROUP_ENVIRONMENT, KernelCgroup

    monkeypatch.delenv(CGROUP_ENVIRONMENT, raising=False)
    assert KernelCgroup.parent()[0] is None
    monkeypatch.setenv(CGROUP_ENVIRONMENT, str(tmp_path))
    assert KernelCgroup.parent()[0] is None, "a folder without memory and pids enabled is not used"
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    parent, how = KernelCgroup.parent()
    assert parent == str(tmp_path) and "memory.max" in how
    cgroup = KernelCgroup(parent, "kernel-1").create(KernelLimits(memory=2 * GiB, processes=64))
    folder = tmp_path / "kernel-1"
    assert (folder / "memory.max").read_text() == f"{2 * GiB}\n" and (folder / "pids.max").read_text() == "64\n"
    printed = subprocess.run(cgroup.enter(["sh", "-c", "echo $$"]), capture_output=True, text=True).stdout.strip()
    assert (folder / "cgroup.procs").read_text().strip() == printed, "the kernel's first process joined it"
    (folder / "memory.events").write_text("low 0\noom 1\noom_kill 1\n")
    assert cgroup.oom_killed()
