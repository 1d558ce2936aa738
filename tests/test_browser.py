"""The student's day in JupyterLab, in a real browser (Playwright driving the system Chromium).

A student kit holding Lab 0.1 is built in a temporary folder and ``jupyter lab`` is started on it
as the kit's ``make lab`` does: on 127.0.0.1, a free port, a token, kernels that import the kit's
student edition of ``course_lib`` (PYTHONPATH) and load the extension the kit's ``make setup``
installs. One browser session then does what a student does:

- chapter 4 (paging): types the reference ``BlockAllocator`` into its answer cell, runs all cells,
  and looks at the page: the plots are images, the block-table explorer renders and redraws when
  its slider moves, the visible tests print their pass lines, no other cell raises; then
  ``check_notebook`` from a new cell, on the saved file;
- chapter 1 (tokenization), as released: "Run All" stops at the first test, whose output is the
  course's failure message (expected, got, hint) with no frame of the library in its traceback.

Skipped, with the reason, where Chromium or Playwright is missing (``make setup`` installs both).
The whole module takes about a minute; it is marked slow.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from autograde.demos import solution_answer
from autograde.kit import build_kit
from autograde.layout import list_labs

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
LAB = "lab01-text-to-tensors"
CHROMIUM = shutil.which("chromium") or next(
    (path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(path).exists()), None)
SERVER_START_S = 120
RUN_S = 240   # the longest a notebook may take to run in the browser on a busy 2-core machine

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the test extras install it
    sync_playwright = None

if sync_playwright is None:
    pytest.skip("Playwright is not installed (pip install -e '.[test]', as make setup does)", allow_module_level=True)
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (make setup installs the Debian package chromium where it can)",
                allow_module_level=True)


# --------------------------------------------------------------------------------------------
# The kit and its JupyterLab
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _settings(folder: Path) -> None:
    """JupyterLab settings of a plain student install, minus what gets in a test's way."""
    notebook = folder / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True)
    # Every cell in the page (no virtual scrolling), so outputs far down can be read.
    (notebook / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    apputils = folder / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)
    (apputils / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kit")
    # Lab 0.1 locked, as during its weeks; the later labs are unlocked only so that this kit does
    # not depend on whether their references are all marked (the kit build checks that for them).
    later = [lab for lab in list_labs(ROOT / "solutions") if lab != LAB]
    return build_kit(ROOT, folder / "kit", labs=[LAB], unlock=later).folder


@pytest.fixture(scope="module")
def environment(kit, tmp_path_factory) -> dict[str, str]:
    """The server's environment; its kernels inherit it."""
    from course_lib.handin.stubs import write_kernel_config

    home = tmp_path_factory.mktemp("jupyter")
    _settings(home / "settings")
    write_kernel_config(home / "ipython" / "profile_default")   # what the kit's make setup writes
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JUPYTER", "IPYTHON"))}
    env.update({"PYTHONPATH": str(kit), "IPYTHONDIR": str(home / "ipython"),
                "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
                "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
                "MPLCONFIGDIR": str(home / "matplotlib"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    return env


@pytest.fixture(scope="module")
def server(kit, environment, tmp_path_factory):
    """(base URL, token) of a running `jupyter lab` on the kit; stopped (with its kernels) at the end."""
    port, token = _free_port(), os.urandom(16).hex()
    log = tmp_path_factory.mktemp("server-log") / "jupyter.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={kit}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=kit, env=environment, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)   # the server and the kernels it started
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def browser(server):
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            chromium.close()


# --------------------------------------------------------------------------------------------
# Driving JupyterLab
# --------------------------------------------------------------------------------------------

_PROMPTS = "() => [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')]" \
           ".map(e => e.textContent.trim())"


def _open(browser, server, notebook: str, workspace: str):
    base, token = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/labs/{LAB}/{notebook}?reset&token={token}")
    page.locator(".jp-NotebookPanel .jp-CodeCell").first.wait_for()
    _wait_idle(page, 90)
    return page


def _wait_idle(page, timeout_s: float) -> None:
    page.get_by_text(re.compile(r"\| Idle$")).wait_for(timeout=timeout_s * 1000)


def _menu(page, menu: str, item: str) -> None:
    page.get_by_role("menuitem", name=menu, exact=True).click()
    page.get_by_role("menuitem", name=item, exact=True).click()


def _wait_until_run(page) -> list[str]:
    """Wait until no cell is queued or running and the kernel is idle; the code cells' prompts."""
    page.wait_for_function(f"() => !({_PROMPTS})().includes('[*]:')", timeout=RUN_S * 1000)
    _wait_idle(page, RUN_S)
    return page.evaluate(_PROMPTS)


def _run_all(page, *, keep_going: bool) -> int:
    """Run > Run All Cells; with ``keep_going``, run on from each cell where a failing test stopped it.

    Returns how many times the run stopped at an error.
    """
    _menu(page, "Run", "Run All Cells")
    prompts, stops = _wait_until_run(page), 0
    while keep_going and "[ ]:" in prompts and stops < 10:
        stops += 1
        page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt").nth(prompts.index("[ ]:")).click()
        _menu(page, "Run", "Run Selected Cell and All Below")
        prompts = _wait_until_run(page)
    return stops


def _cells(page):
    return page.locator(".jp-NotebookPanel .jp-Cell")


def _code_cell(page, text: str):
    return page.locator(".jp-NotebookPanel .jp-CodeCell").filter(has=page.locator(".cm-content", has_text=text))


def _outputs(cell) -> str:
    return "\n".join(cell.locator(".jp-OutputArea-output").all_inner_texts())


def _shows_error(text: str) -> bool:
    return "Traceback (most recent call last)" in text or bool(
        re.search(r"^\w*(Error|Exception|Failed|OffTheRecord)\b.*", text, re.MULTILINE))


# --------------------------------------------------------------------------------------------
# The two chapters, each opened once for the whole module
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paging(browser, server):
    """Chapter 4 with the reference BlockAllocator typed in and every cell run."""
    solution = nbformat.read(ROOT / "solutions" / LAB / "04_paging.ipynb", as_version=4)
    answer = solution_answer(next(cell.source for cell in solution.cells
                                  if cell.metadata.get("nbgrader", {}).get("grade_id") == "block_allocator"))
    page = _open(browser, server, "04_paging.ipynb", "paging")
    editor = _code_cell(page, "class BlockAllocator:").locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(answer)
    page.keyboard.press("Escape")
    stops = _run_all(page, keep_going=True)
    yield page, stops
    page.close()


@pytest.fixture(scope="module")
def tokenization(browser, server):
    """Chapter 1 as released: Run All stops at the first test."""
    page = _open(browser, server, "01_tokenization.ipynb", "tokenization")
    _run_all(page, keep_going=False)
    yield page
    page.close()


def test_the_kernels_import_the_kit_edition(environment, kit):
    probe = subprocess.run([sys.executable, "-c", "import course_lib, course_lib.exercises as e; "
                            "print(course_lib.__file__); print(e.is_student_edition(), e.is_locked('" + LAB + "'))"],
                           env=environment, capture_output=True, text=True, timeout=60, cwd=kit / "labs" / LAB)
    lines = probe.stdout.split()
    assert probe.returncode == 0, probe.stderr
    assert Path(lines[0]).resolve().is_relative_to(kit.resolve()), lines
    assert lines[1:] == ["True", "True"]


def test_the_typed_answer_made_every_code_cell_run(paging):
    page, _ = paging
    prompts = page.evaluate(_PROMPTS)
    assert prompts and all(re.fullmatch(r"\[\d+\]:", prompt) for prompt in prompts), prompts
    answer_cell = _code_cell(page, "class BlockAllocator:")
    assert "popleft" in answer_cell.locator(".cm-content").inner_text()   # the typed code, not the stub
    assert not _shows_error(_outputs(answer_cell))


def test_the_plots_are_images_in_the_page(paging):
    page, _ = paging
    for text in ("viz.utilization_comparison", "viz.paged_waste_vs_bound", "viz.block_size_tradeoff"):
        image = _code_cell(page, text).locator(".jp-RenderedImage img")
        assert image.count() == 1, text
        assert image.evaluate("img => img.complete && img.naturalWidth > 100 && img.naturalHeight > 100"), text


def test_the_block_table_explorer_renders_and_redraws_when_its_slider_moves(paging):
    page, _ = paging
    explorer = _code_cell(page, "viz.PagingExplorer")
    image = explorer.locator("img.widget-image")
    image.wait_for()
    readout = explorer.locator(".widget-slider .widget-readout")
    step, before = int(readout.inner_text()), image.get_attribute("src")
    assert image.evaluate("img => img.complete && img.naturalWidth > 100")
    explorer.locator(".widget-slider .noUi-handle").focus()
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("([img, src]) => img.getAttribute('src') !== src",
                           arg=[image.element_handle(), before], timeout=30_000)
    assert int(readout.inner_text()) == step - 1
    assert image.evaluate("img => img.complete && img.naturalWidth > 100")


def test_worked_examples_and_plots_raise_nothing(paging):
    page, _ = paging
    cells = page.locator(".jp-NotebookPanel .jp-CodeCell").filter(
        has_not=page.locator(".cm-content", has_text="checks.check_"))
    raised = [_outputs(cells.nth(i))[-400:] for i in range(cells.count()) if _shows_error(_outputs(cells.nth(i)))]
    assert not raised, raised


def test_every_visible_test_prints_its_pass_line_and_no_cell_shows_a_traceback(paging):
    page, stops = paging
    tests = _code_cell(page, "checks.check_")
    assert tests.count() == 6
    outputs = [_outputs(tests.nth(i)) for i in range(tests.count())]
    assert all("passed" in output and not _shows_error(output) for output in outputs), outputs
    assert stops == 0


def test_a_blank_exercise_fails_with_the_course_message_and_no_library_frames(tokenization):
    page = tokenization
    prompts = page.evaluate(_PROMPTS)
    first_test = _code_cell(page, "checks.check_get_pair_counts(get_pair_counts")
    output = _outputs(first_test)
    assert "get_pair_counts is not written yet." in output, output
    for line in ("expected: your code in place of `raise NotImplementedError()`",
                 "got:      the placeholder the notebook was released with",
                 "hint: write get_pair_counts, run its cell (Shift+Enter), then run this cell again."):
        assert line in output, output
    frames = re.findall(r"^(Cell In\[\d+\]|File .*?), line", output, re.MULTILINE) or \
        re.findall(r"^(Cell In\[\d+\]|File \S+)", output, re.MULTILINE)
    assert len(frames) == 2 and all(frame.startswith("Cell In[") for frame in frames), output   # test, then answer
    assert prompts.count("[ ]:") > 10   # Run All stopped there, as it does for any error


def test_course_check_from_a_cell_reports_on_the_saved_notebook(paging):
    page, _ = paging
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')")
    _cells(page).last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")    # a new code cell below the last one
    page.keyboard.press("Enter")
    page.keyboard.insert_text('from course_lib.handin import check_notebook\ncheck_notebook("04_paging.ipynb")')
    page.keyboard.press("Shift+Enter")
    check_cell = _code_cell(page, "check_notebook(")
    check_cell.locator(".jp-OutputArea-output", has_text="The file to hand in?").wait_for(timeout=RUN_S * 1000)
    output = _outputs(check_cell)
    assert re.search(r"04_paging: its \d+ code cells ran in a fresh kernel in [0-9.]+ s; none raised", output), output
    assert re.search(r"block_allocator\s+11\s+(passed|failed)", output), output
    assert "The file to hand in? yes" in output and "ok   test cells: all 6 as released" in output, output
    assert "CheckReport(04_paging.ipynb: visible: 11 of 11 points; 4 points are graded by your TA; ready to hand in: yes)" in output and "ExerciseResult(" not in output
