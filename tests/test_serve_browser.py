"""``course serve`` in a real browser: the chat page and the engine view (Playwright, system Chromium).

``course serve --model tiny`` runs as a user starts it, on 127.0.0.1 and a free port, with a small
KV pool (24 blocks of 16 tokens) so that a load test fills it and preempts. The tiny random model
answers gibberish in milliseconds, which is all a test of the pages needs. One browser then:

- types a question and sees the answer stream in piece by piece, with its TTFT/TPOT line;
- asks twice at temperature 0 with a fixed seed and gets the same answer (the second time with
  prompt tokens from the prefix cache);
- sends a prompt longer than the context and reads the 400's reason on the page, and meets a 429
  with its Retry-After counted down to a retry button;
- opens the engine view while ``course loadtest`` runs and sees the queues and the block grid
  change between two screenshots (and a preemption);
- looks at both pages at 200% zoom (one column, nothing cut off) and checks every control has a label;
- opens the engine view of a router in front of two replicas: one panel per replica, and the
  router's choice for each request.

Every page load is checked for console errors, uncaught exceptions and requests that leave the
server's own address. Skipped, with the reason, where Playwright or Chromium is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.server.launch import free_port, wait_healthy

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or next(
    (path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(path).exists()), None)
# Headless, and nothing Chromium would fetch on its own (updates, sync, safe browsing): the test
# asserts that every request goes to the server under test.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                 "--disable-default-apps", "--disable-features=Translate,OptimizationHints,MediaRouter"]
NUM_BLOCKS = 24

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the test extras install it
    sync_playwright = None

if sync_playwright is None:
    pytest.skip("Playwright is not installed (pip install -e '.[test]', as make setup does)", allow_module_level=True)
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (make setup installs the Debian package chromium where it can)",
                allow_module_level=True)


def _course(*args: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "course_lib.cli", *args], cwd=ROOT, start_new_session=True,
                            **options)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The URL of ``course serve --model tiny`` on a free loopback port; stopped with Ctrl-C at the end."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as output:
        process = _course("serve", "--model", "tiny", "--port", str(port), "--num-blocks", str(NUM_BLOCKS),
                          "--max-num-seqs", "4", "--max-num-batched-tokens", "64",
                          stdout=output, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=180, process=process)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    assert process.returncode == 0, log.read_text()[-3000:]


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class PageLog:
    """What a page did besides rendering: console errors, uncaught exceptions, every URL it asked for."""

    def __init__(self, page) -> None:
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        page.on("request", lambda request: self.requests.append(request.url))

    def check(self, base: str, expected_console_errors: int = 0) -> None:
        assert not self.page_errors, self.page_errors
        foreign = [url for url in self.requests if not url.startswith(base + "/")]
        assert not foreign, f"requests that left {base}: {foreign}"
        assert len(self.console_errors) == expected_console_errors, self.console_errors


@pytest.fixture
def open_page(browser):
    contexts = []

    def open_(url: str, **context_options):
        context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context_options})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        log = PageLog(page)
        page.goto(url)
        return page, log

    yield open_
    for context in contexts:
        context.close()


def _settings(page, **values) -> None:
    for name, value in values.items():
        field = page.locator(f"#{name}")
        if isinstance(value, bool):
            field.set_checked(value)
        else:
            field.fill(str(value))


def _ask(page, question: str, timeout_s: float = 60):
    """Type ``question``, press Enter, wait for the answer's stats line; the answer's list item."""
    before = page.locator(".message.assistant .stats").count()
    page.locator("#message").fill(question)
    page.locator("#message").press("Enter")
    page.locator(".message.assistant .stats").nth(before).wait_for(timeout=timeout_s * 1000)
    return page.locator(".message.assistant").nth(before)


# ---- the chat page -------------------------------------------------------------------------------


def test_an_answer_streams_in_with_its_timings(served, open_page):
    page, log = open_page(served + "/")
    page.get_by_text("engine running").wait_for()
    assert page.locator("#model-name").inner_text() == "· tiny-random-llama"
    assert "24 blocks of 16 tokens" in page.locator("#server-facts").inner_text()
    _settings(page, max_tokens=60, ignore_eos=True)
    # Count the answer's text changes as they happen: a streamed answer changes many times.
    page.evaluate("""() => {
        window.textChanges = 0;
        new MutationObserver(() => { window.textChanges += 1; })
            .observe(document.getElementById('messages'), {subtree: true, characterData: true, childList: true});
    }""")
    answer = _ask(page, "What is a KV cache?")
    text = answer.locator(".text").inner_text()
    stats = answer.locator(".stats")
    assert text.strip()
    assert page.evaluate("window.textChanges") > 10, "the answer arrived in one piece, not streamed"
    assert stats.get_attribute("data-completion-tokens") == "60"
    assert float(stats.get_attribute("data-ttft")) > 0 and float(stats.get_attribute("data-tpot")) > 0
    assert float(stats.get_attribute("data-tokens-per-s")) > 0
    prompt_tokens = int(stats.get_attribute("data-prompt-tokens"))
    line = stats.inner_text()
    assert "TTFT" in line and "TPOT" in line and "tokens/s" in line and f"{prompt_tokens} prompt tokens" in line
    # The next turn sends the whole conversation again: its first blocks come from the prefix cache.
    second = _ask(page, "And why is it paged?")
    assert int(second.locator(".stats").get_attribute("data-cached-tokens")) >= 16
    assert "from the prefix cache" in second.locator(".stats").inner_text()
    page.locator("#new-conversation").click()
    assert page.locator(".message").count() == 0
    log.check(served)


def test_greedy_with_a_seed_gives_the_same_answer_twice(served, open_page):
    page, log = open_page(served + "/")
    _settings(page, temperature=0, seed=1234, max_tokens=40)
    answers = []
    for _ in range(2):
        page.locator("#new-conversation").click()
        answers.append(_ask(page, "Name three colours.").locator(".text").inner_text())
    assert answers[0].strip() and answers[0] == answers[1]
    log.check(served)


def test_a_prompt_longer_than_the_context_shows_the_servers_reason(served, open_page):
    page, log = open_page(served + "/")
    too_long = "tokens " * 2500   # the tiny model's context is 2,048 tokens
    page.locator("#message").fill(too_long)
    page.locator("#send").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    message = alert.inner_text()
    assert "400" in message and "the context is 2048" in message, message
    assert page.locator(".message").count() == 0                      # nothing half-sent stays on the page
    assert page.locator("#message").input_value() == too_long           # the text is back, to be shortened
    log.check(served, expected_console_errors=1)                        # Chromium logs the 400 response itself
    assert "400" in log.console_errors[0]


def test_a_429_says_when_to_retry_and_counts_down_to_a_retry_button(open_page):
    from course_lib.server.admission import AdmissionLimits, admission_policy
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model

    model, tokenizer = tiny_random_model()
    full = AdmissionLimits(max_waiting=0, kv_budget_blocks=32, retry_after_s=2)   # the queue is always full
    with start_server(model, tokenizer, model_name="tiny", num_blocks=32, admission=admission_policy,
                      limits=full) as server:
        page, log = open_page(server.url + "/")
        page.locator("#message").fill("Anyone there?")
        page.locator("#message").press("Enter")
        alert = page.get_by_role("alert")
        alert.wait_for()
        text = alert.inner_text()
        assert "429 Too Many Requests" in text and "the queue is full" in text and "retry after 2 s" in text, text
        retry = alert.get_by_role("button")
        assert retry.is_disabled() and "Retry in" in retry.inner_text()
        page.wait_for_function("() => !document.querySelector('#alert button').disabled", timeout=10_000)
        assert retry.inner_text() == "Retry now"
        retry.click()                                   # sends the same message again: refused again
        page.wait_for_function("() => document.querySelector('#alert button')?.disabled === true")
        assert page.locator(".message").count() == 0
        log.check(server.url, expected_console_errors=2)   # Chromium logs each 429 response itself
        page.context.close()


def test_every_control_has_a_label_and_the_pages_fit_at_200_percent_zoom(served, open_page):
    # 200% zoom on a 1280-pixel window: a 640-pixel-wide layout drawn at twice the pixel density.
    for path in ("/", "/engine"):
        page, log = open_page(served + path, viewport={"width": 640, "height": 900}, device_scale_factor=2)
        page.wait_for_load_state("networkidle") if path == "/" else page.get_by_text("Connected").wait_for()
        unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, textarea, select')]
            .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.id || e.name)""")
        assert not unlabelled, unlabelled
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways at 200% zoom by {overflow} px"
        log.check(served)
    # Keyboard only: the page opens with the message box focused, and Tab reaches every control.
    page, _ = open_page(served + "/")
    page.wait_for_function("document.activeElement.id === 'message'")
    reached = []
    for _ in range(25):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id"))
    for control in ("send", "temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "ignore_eos", "defaults"):
        assert control in reached, (control, reached)


# ---- the engine view ----------------------------------------------------------------------------


def test_the_engine_view_shows_queues_and_blocks_change_under_load(served, open_page, tmp_path):
    page, log = open_page(served + "/engine")
    page.get_by_text("Connected").wait_for()
    panel = page.locator(".panel").first
    panel.locator("canvas").first.wait_for()
    # 19 requests over 2 s (the view must change while they run), each 200 tokens (13 of the pool's 24
    # blocks): a request lasts 200 steps while a new one arrives every ~80 ms, so three or four are in
    # flight at staggered lengths, and together they outgrow the pool's 384 token slots long before the
    # run ends. (With 96 tokens the run preempted only when four requests happened to run in step.)
    loadtest = _course("loadtest", served, "--rps", "12", "--duration", "2", "--max-tokens", "200",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # What is drawn (the step number in the panel's heading, the rows of the running table), not only
    # what arrived: the view draws once per animation frame.
    drawn_step = "Number((document.querySelector('.panel header .sub').textContent.match(/step ([\\d,]+)/) " \
                 "|| [0, '0'])[1].replace(/,/g, ''))"
    drawn_running = "document.querySelectorAll('.panel .queues section:first-child tbody tr').length"
    try:
        page.wait_for_function(f"() => {drawn_running} >= 2", timeout=60_000)
        first_step = page.evaluate(drawn_step)
        shots = [panel.screenshot(path=str(tmp_path / "engine-1.png"))]
        pool_shots = [panel.locator(".pool canvas").screenshot()]
        # Only the step: on a loaded machine the page may next draw after the last request has ended.
        page.wait_for_function(f"() => {drawn_step} >= {first_step + 20}", timeout=60_000)
        shots.append(panel.screenshot(path=str(tmp_path / "engine-2.png")))
        pool_shots.append(panel.locator(".pool canvas").screenshot())
        out, err = loadtest.communicate(timeout=120)
    finally:
        if loadtest.poll() is None:
            loadtest.kill()
    assert loadtest.returncode == 0, err
    assert not log.page_errors, log.page_errors
    assert shots[0] != shots[1] and pool_shots[0] != pool_shots[1], "the view did not change while the engine ran"
    # Over the run the view showed a full batch, a queue and blocks in use, and (the pool holds 24
    # blocks; three requests of 200 tokens in flight need more) at least one preemption, listed as it happened.
    page.wait_for_function("() => Number(document.querySelector('.panel').dataset.running) === 0", timeout=60_000)
    data = panel.evaluate("p => ({...p.dataset})")
    assert int(data["maxRunning"]) >= 2 and int(data["maxWaiting"]) >= 1 and int(data["maxUsed"]) >= 8, data
    assert int(data["preemptions"]) >= 1, data
    assert "preempted; its" in panel.locator("ol.log").inner_text()
    assert "requests, median" in panel.locator("figcaption").first.inner_text()   # the TTFT chart has points
    log.check(served)


def test_the_engine_view_of_a_router_shows_each_replica_and_its_choices(open_page):
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model
    from course_lib.server.router import start_router
    from course_lib.server.routing import RoundRobin

    model, tokenizer = tiny_random_model()
    with start_server(model, tokenizer, model_name="tiny", num_blocks=32) as first, \
            start_server(model, tokenizer, model_name="tiny", num_blocks=32) as second:
        with start_router([first.url, second.url], RoundRobin(2), tokenizer, policy_name="round-robin") as router:
            page, log = open_page(router.url + "/engine")
            page.locator("#router").wait_for()
            assert page.locator(".panel").count() == 2
            chat, chat_log = open_page(router.url + "/")
            _settings(chat, max_tokens=8)
            replicas = []
            for question in ("One?", "Two?"):
                answer = _ask(chat, question)
                replicas.append(answer.locator(".stats").get_attribute("data-replica"))
            assert replicas == ["0", "1"]
            assert "replica 1" in answer.locator(".stats").inner_text()
            page.wait_for_function("() => document.querySelectorAll('#routes tr').length >= 2")
            routes = page.locator("#routes").inner_text()
            assert "route-0" in routes and "route-1" in routes and "replica 1" in routes
            assert "round-robin" in page.locator("#router-summary").inner_text()
            for index in (0, 1):
                page.wait_for_function(f"() => document.querySelectorAll('.panel')[{index}].dataset.step > 0")
            log.check(router.url)
            chat_log.check(router.url)
            page.context.close()   # before the servers stop, so no stream is cut off at shutdown
            chat.context.close()


def test_the_engine_view_of_a_kv_aware_router_shows_the_free_blocks_it_routed_by(open_page):
    from course_lib.server.balancing import KVAwareRouter, MetricsRouting, kv_load
    from course_lib.server.launch import start_server
    from course_lib.server.models import tiny_random_model
    from course_lib.server.router import start_router

    model, tokenizer = tiny_random_model()
    policy = MetricsRouting(KVAwareRouter(2), kv_load)
    with start_server(model, tokenizer, model_name="tiny", num_blocks=32) as first, \
            start_server(model, tokenizer, model_name="tiny", num_blocks=48) as second:
        with start_router([first.url, second.url], policy, tokenizer, policy_name="kv-aware") as router:
            page, log = open_page(router.url + "/engine")
            page.locator("#router").wait_for()
            chat, chat_log = open_page(router.url + "/")
            _settings(chat, max_tokens=4)
            _ask(chat, "Where do my blocks go?")
            page.wait_for_function("() => document.querySelectorAll('#routes tr').length >= 1")
            assert page.locator("#kv-free-heading").is_visible()
            assert "[32, 48]" in page.locator("#routes").inner_text()   # both pools, as last reported, idle
            assert "free KV blocks each replica reports" in page.locator("#router-summary").inner_text()
            log.check(router.url)
            chat_log.check(router.url)
            page.context.close()
            chat.context.close()
