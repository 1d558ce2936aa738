"""`course mark`'s JSON API over real HTTP (autograde.marking.server): the token and the Host check, the
rubric rules a mark must follow, the messages two TAs get when they collide, anonymous grading, and
hostile answers handed to the page as inert text."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from autograde.marking.server import SECURITY_HEADERS, STATIC_DIR, MarkingServer
from autograde.marking.session import open_session
from tests.marking_fixture import LAB, fixture_questions, write_class, write_questions

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> & </div>'
CACHE = "01_questions/written_cache"
BATCHING = "01_questions/written_batching"


def _class(tmp_path: Path) -> tuple[Path, object]:
    questions = fixture_questions(tmp_path / "questions")
    out = write_class(tmp_path / "out", {
        "student-alpha": {"written_cache": "Keys and values never change.", "written_batching": "Shared weights."},
        "student-bravo": {"written_cache": HOSTILE},
        "student-charlie": {"written_cache": None, "written_batching": "   "},
    })
    return out, questions


@pytest.fixture
def served(tmp_path):
    out, questions = _class(tmp_path)
    server = MarkingServer(open_session(out, LAB, questions=questions), "127.0.0.1", 0)
    server.start()
    client = httpx.Client(base_url=f"http://127.0.0.1:{server.port}", headers={"X-Marking-Token": server.token},
                          timeout=30)
    yield server, client
    client.close()
    server.shutdown()
    server.server_close()


def _keys(client, question=CACHE) -> dict[str, str]:
    return {a["student"]: a["key"] for a in client.get("/api/answers", params={"question": question}).json()["answers"]}


def _post(client, path, **body):
    return client.post(path, json=body)


# ------------------------------------------------------------------------------------- who may ask

def test_the_page_and_every_answer_carry_the_security_headers(served):
    server, client = served
    page = httpx.get(f"http://127.0.0.1:{server.port}/", timeout=30)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for response in (page, client.get("/api/lab"), httpx.get(f"http://127.0.0.1:{server.port}/api/lab", timeout=30)):
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert not re.search(r"https?://", page.text), "the page loads something from elsewhere"


def test_the_page_never_turns_data_into_html():
    script = (STATIC_DIR / "mark.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "srcdoc"):
        assert sink not in script, f"mark.js uses {sink}"
    assert "textContent" in script
    assert not re.search(r"https?://", script + (STATIC_DIR / "mark.css").read_text() + (STATIC_DIR / "mark.html").read_text())


def test_the_api_needs_the_token(served):
    server, client = served
    bare = httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30)
    for response in (bare.get("/api/lab"), bare.get("/api/lab", headers={"X-Marking-Token": "guess"}),
                     bare.post("/api/marks", json={})):
        assert response.status_code == 401 and "token" in response.json()["error"]
    assert client.get("/api/lab").status_code == 200


def test_a_request_for_another_host_name_is_refused(served):
    server, client = served
    response = client.get("/api/lab", headers={"Host": f"attacker.example:{server.port}"})
    assert response.status_code == 421
    assert client.get("/api/lab", headers={"Host": f"localhost:{server.port}"}).status_code == 200


def test_only_small_json_bodies_are_accepted(served):
    _, client = served
    assert client.post("/api/claim", content=b"question=x", headers={"Content-Type": "application/x-www-form-urlencoded"}
                       ).status_code == 415
    assert client.post("/api/claim", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert client.post("/api/claim", content=b"[1]", headers={"Content-Type": "application/json"}).status_code == 400
    big = json.dumps({"comment": "x" * 70_000}).encode()
    assert client.post("/api/marks", content=big, headers={"Content-Type": "application/json"}).status_code == 413


# ------------------------------------------------------------------------------------- what it says

def test_the_lab_lists_questions_rubrics_and_honest_progress(served):
    _, client = served
    lab = client.get("/api/lab").json()
    assert lab["lab"] == LAB and lab["students"] == 3 and not lab["anonymous"]
    cache, batching = lab["questions"]
    assert cache["key"] == CACHE and cache["points"] == 3
    assert [c["id"] for c in cache["criteria"]] == ["reuse", "cost"] and cache["criteria"][0]["levels"] == [2, 1, 0]
    assert cache["progress"] == {"answered": 2, "graded": 0, "awaiting": 2, "blank": 0, "missing": 1,
                                 "unreadable": 0, "total": 3}
    assert batching["progress"]["blank"] == 2 and batching["progress"]["awaiting"] == 1


def test_a_hostile_answer_reaches_the_page_as_the_text_it_is(served):
    _, client = served
    response = client.get("/api/answers", params={"question": CACHE})
    assert response.headers["content-type"] == "application/json"
    answers = {a["student"]: a for a in response.json()["answers"]}
    assert answers["student-bravo"]["text"] == HOSTILE and answers["student-bravo"]["status"] == "answered"
    assert answers["student-charlie"]["status"] == "missing"


# ------------------------------------------------------------------------------------- marks and TAs

def test_two_tas_get_clear_messages_and_no_mark_is_lost(served):
    _, client = served
    key = _keys(client)["student-alpha"]
    assert _post(client, "/api/claim", question=CACHE, answer=key, grader="Ann").status_code == 200
    taken = _post(client, "/api/claim", question=CACHE, answer=key, grader="Bob")
    assert taken.status_code == 409 and taken.json()["claim"]["grader"] == "Ann"
    assert "Ann is grading this answer" in taken.json()["error"]
    blocked = _post(client, "/api/marks", question=CACHE, answer=key, grader="Bob", criteria={"reuse": 2},
                    expected_version=0)
    assert blocked.status_code == 409 and "Ann is grading this answer now" in blocked.json()["error"]

    saved = _post(client, "/api/marks", question=CACHE, answer=key, grader="Ann", criteria={"reuse": 1, "cost": 1},
                  comment="Half of why.", expected_version=0)
    assert saved.status_code == 200
    assert saved.json()["mark"]["points"] == 2 and saved.json()["mark"]["criteria"] == {"reuse": 1, "cost": 1}
    first = saved.json()["mark"]["version"]
    assert first > 0 and saved.json()["mark"]["grader"] == "Ann"
    assert _post(client, "/api/release", question=CACHE, answer=key, grader="Ann").status_code == 200

    stale = _post(client, "/api/marks", question=CACHE, answer=key, grader="Bob", criteria={"reuse": 2},
                  expected_version=0)            # Bob opened the answer before Ann saved
    assert stale.status_code == 409
    assert "Ann saved a mark for this answer" in stale.json()["error"]
    assert stale.json()["current"]["points"] == 2 and stale.json()["current"]["comment"] == "Half of why."
    changed = _post(client, "/api/marks", question=CACHE, answer=key, grader="Bob", criteria={"reuse": 2, "cost": 1},
                    comment="Full marks after all.", expected_version=first, reason="second reading")
    assert changed.status_code == 200 and changed.json()["mark"]["version"] > first
    history = client.get("/api/history", params={"question": CACHE, "answer": key}).json()["history"]
    assert [(m["grader"], m["points"], m["reason"]) for m in history] == \
        [("Ann", 2, ""), ("Bob", 3, "second reading")]
    answers = client.get("/api/answers", params={"question": CACHE}).json()["answers"]
    assert next(a for a in answers if a["key"] == key)["mark"]["points"] == 3
    assert client.get("/api/lab").json()["questions"][0]["progress"]["graded"] == 1


@pytest.mark.parametrize("body, message", [
    (dict(criteria={"reuse": 1.5}), "criterion reuse gives 2, 1, 0 points, not 1.5"),
    (dict(criteria={"style": 1}), "no criterion style"),
    (dict(criteria={"reuse": 2}, adjustment=0.5), "needs a comment"),
    (dict(criteria={"reuse": 2, "cost": 1}, adjustment=1, comment="extra"), "must be between 0 and 3"),
    (dict(criteria={}, adjustment=-1, comment="penalty"), "must be between 0 and 3"),
    (dict(criteria={"reuse": True}), "must be a number"),
    (dict(criteria={"reuse": 2}, expected_version="0"), "expected_version"),
    (dict(criteria={"reuse": 2}, grader="<b>x</b>"), "say who you are"),
])
def test_a_mark_that_breaks_the_rubric_is_refused(served, body, message):
    _, client = served
    key = _keys(client)["student-alpha"]
    request = {"question": CACHE, "answer": key, "grader": "Ann", "expected_version": 0, **body}
    response = client.post("/api/marks", json=request)
    assert response.status_code == 400 and message in response.json()["error"]


def test_an_adjustment_with_its_reason_is_accepted(served):
    _, client = served
    key = _keys(client)["student-alpha"]
    response = _post(client, "/api/marks", question=CACHE, answer=key, grader="Ann", criteria={"reuse": 2},
                     adjustment=0.5, comment="A clear example beyond the rubric.", expected_version=0)
    assert response.status_code == 200 and response.json()["mark"]["points"] == 2.5


def test_unknown_questions_and_answers_are_named(served):
    _, client = served
    response = client.get("/api/answers", params={"question": "01_questions/written_nothing"})
    assert response.status_code == 404 and "written_cache" in response.json()["error"]
    assert _post(client, "/api/claim", question=CACHE, answer="0" * 16, grader="Ann").status_code == 404
    assert _post(client, "/api/claim", question=CACHE, answer="student-alpha", grader="Ann").status_code == 400
    assert client.get("/api/nothing").status_code == 404


# ------------------------------------------------------------------------------------- anonymous

def test_anonymous_grading_never_sends_a_student_id_and_keeps_its_keys_across_restarts(tmp_path):
    out, questions = _class(tmp_path)
    keys = []
    for _ in range(2):     # a second session on the same folder: same keys, same marks (resumable)
        server = MarkingServer(open_session(out, LAB, questions=questions, anonymous=True), "127.0.0.1", 0)
        server.start()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}",
                              headers={"X-Marking-Token": server.token}, timeout=30) as client:
                payloads = [client.get("/api/lab").text,
                            *(client.get("/api/answers", params={"question": q}).text for q in (CACHE, BATCHING))]
                answers = json.loads(payloads[1])["answers"]
                assert [a["label"] for a in answers] == ["Answer 1", "Answer 2", "Answer 3"]
                keys.append([a["key"] for a in answers])
                if len(keys) == 1:
                    saved = _post(client, "/api/marks", question=CACHE, answer=answers[0]["key"], grader="Ann",
                                  criteria={"cost": 1}, expected_version=0)
                    payloads.append(saved.text)
                else:
                    assert answers[0]["mark"]["points"] == 1
                for payload in payloads:
                    assert "student-" not in payload, "a student id reached an anonymous page"
        finally:
            server.shutdown()
            server.server_close()
    assert keys[0] == keys[1]
    assert (out / "marking" / "answer-keys.secret").stat().st_mode & 0o077 == 0


def test_the_server_listens_on_loopback_by_default(served):
    server, _ = served
    assert server.server_address[0] == "127.0.0.1" and server.loopback_only()
    assert server.url.startswith(f"http://127.0.0.1:{server.port}/#token=")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass


# ------------------------------------------------------------------------------------- the command

@pytest.mark.parametrize("setup, arguments, message", [
    ("nothing", [], "holds no autograded/ folder: give the --out folder of `course grade`"),
    ("class", ["--lab", "lab98-nothing"], "--lab lab98-nothing: no written questions for it"),
    ("empty", [], "nobody's graded notebooks of it"),
    ("class", ["--lease", "1"], "--lease must be 10 to 86400 seconds"),
])
def test_course_mark_says_what_is_missing(tmp_path, capsys, setup, arguments, message):
    from autograde.cli import main

    out = tmp_path / "out"
    if setup == "class":
        _class(tmp_path)
    elif setup == "empty":
        write_questions(tmp_path / "questions")
        (out / "autograded").mkdir(parents=True)
    else:
        out.mkdir()
    options = {"--lab": LAB, "--questions": str(tmp_path / "questions"),
               "--solutions": str(tmp_path / "questions" / "solutions")}
    for flag, value in zip(arguments[::2], arguments[1::2]):
        options[flag] = value
    assert main(["mark", str(out), *[item for pair in options.items() for item in pair]]) == 1
    assert message in capsys.readouterr().err
