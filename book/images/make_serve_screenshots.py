"""Make the screenshots of `course serve`'s pages used in the book and the README.

    python book/images/make_serve_screenshots.py            # writes book/images/serve-chat.png, serve-engine.png

Starts `course serve` with SmolLM2 on a free loopback port (a small KV pool of 22 blocks, so a
load test fills it and preempts), asks the chat page two questions, then opens the engine view while
`course loadtest` sends requests that share a system prompt (so blocks are shared and cached),
and takes each screenshot once the view shows a batch, a queue, shared blocks and a preemption. Needs
Playwright and Chromium (as tests/test_serve_browser.py); takes a minute or two on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
SYSTEM = ("You are a patient teacher of computer systems. Answer in plain words, in at most three sentences, "
          "and give one concrete example with numbers.")
QUESTIONS = ["What does a KV cache store?", "Why do GPUs batch requests?", "What is a page table?",
             "Why is decoding memory-bound?", "What does a scheduler do?", "What is prefix caching?"]


def main() -> int:
    from playwright.sync_api import sync_playwright

    from course_lib.server.launch import free_port, wait_healthy

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "course_lib.cli", "serve", "--port", str(port),
                               "--num-blocks", "22", "--max-num-seqs", "6", "--max-num-batched-tokens", "256"],
                              cwd=ROOT, start_new_session=True)
    try:
        wait_healthy(url, timeout=300, process=server)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-dev-shm-usage", "--disable-background-networking",
                "--disable-component-update", "--hide-scrollbars"])
            chat_page(browser, url)
            engine_page(browser, url)
            browser.close()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    return 0


def chat_page(browser, url: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page.goto(url + "/")
    page.get_by_text("engine running").wait_for(timeout=60_000)
    page.locator("#max_tokens").fill("80")
    page.locator("#seed").fill("7")
    for question in ("What is a KV cache? Answer in two sentences.", "And why does it grow with every token?"):
        before = page.locator(".message.assistant .stats").count()
        page.locator("#message").fill(question)
        page.locator("#message").press("Enter")
        page.locator(".message.assistant .stats").nth(before).wait_for(timeout=180_000)
    page.locator("#message").fill("")
    page.locator("#message").blur()
    page.screenshot(path=str(OUT / "serve-chat.png"), full_page=True)
    page.close()


def engine_page(browser, url: str) -> None:
    dataset = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"{SYSTEM}\n\nQuestion: {q}\nAnswer:", "max_tokens": 48}) + "\n"
                               for q in QUESTIONS))
    page = browser.new_page(viewport={"width": 1280, "height": 1180})
    page.goto(url + "/engine")
    page.get_by_text("Connected").wait_for(timeout=60_000)
    load = subprocess.Popen([sys.executable, "-m", "course_lib.cli", "loadtest", url, "--rps", "1.5", "--duration", "90",
                             "--dataset", str(dataset)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        page.wait_for_function("""() => {
            const p = document.querySelector('.panel');
            return p && Number(p.dataset.running) >= 4 && Number(p.dataset.waiting) >= 1
                && Number(p.dataset.preemptions) >= 1
                && /[1-9]\\d* shared/.test(p.querySelector('.pool .sub').textContent)
                && document.querySelectorAll('.charts figcaption')[0].textContent.includes('median');
        }""", timeout=240_000, polling=200)
        page.wait_for_timeout(300)
        page.screenshot(path=str(OUT / "serve-engine.png"), full_page=True)
    finally:
        load.terminate()
        load.wait(30)
        page.close()


if __name__ == "__main__":
    sys.exit(main())
