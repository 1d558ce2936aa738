"""The book site: its figures, the lab pipeline, a clean build, and the built site in a real browser.

Fast tests check the parts one by one (figure functions, lab discovery, the generated table of
contents). The slow tests build the whole book once (``course book``, warnings are errors), then
check the output: no solution or hidden test leaks into it, every internal link resolves, the
search index exists, and headless Chromium renders the landing page and a lab page (or a chapter
when no lab is released yet) with their titles and figures, and runs a search offline.
Screenshots are saved in the test's temporary folder.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import io
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
import yaml

from autograde.commands import book as book_command
from course_lib import viz

REPO_ROOT = Path(__file__).resolve().parents[1]
BOOK_DIR = REPO_ROOT / "book"
HTML_DIR = BOOK_DIR / "_build" / "html"
FIGURE_DIRECTIVE = re.compile(r"^```\{viz-figure\}\s+(\w+)", re.MULTILINE)
LAB_REFERENCE = re.compile(r"\{ref\}`[^`<]*<([\w-]+)>`")
# The strings that must never reach a student: nbgrader's solution and hidden-test markers.
LEAK_MARKERS = ("BEGIN HIDDEN TESTS", "### BEGIN SOLUTION")
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; `make test` tries)"
)


def _chapter_files() -> list[Path]:
    toc = yaml.safe_load((BOOK_DIR / "_toc.yml").read_text())
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    return [BOOK_DIR / f"{name}.md" for name in files if name.startswith("chapters/")]


def _figure_functions_in_book() -> list[str]:
    names = set()
    for page in BOOK_DIR.glob("**/*.md"):
        if "_build" not in page.parts:
            names.update(FIGURE_DIRECTIVE.findall(page.read_text()))
    return sorted(names)


# ---- figures ---------------------------------------------------------------------------------


def test_every_book_figure_exists_in_viz():
    used = _figure_functions_in_book()
    assert used, "the book draws no viz-figure at all"
    missing = sorted(set(used) - set(viz.figure_names()))
    assert not missing, f"chapters call figure functions that course_lib.viz lacks: {missing}"


@pytest.mark.parametrize("name", viz.figure_names())
def test_figure_is_labelled_and_renders(name):
    # How long each figure takes is measured in benchmarks/book_figures.py, not here.
    figure = getattr(viz, name)()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    for axes in figure.axes:
        twins = [other for other in axes.get_shared_x_axes().get_siblings(axes) if other is not axes]
        has_xlabel = axes.get_xlabel() or any(twin.get_xlabel() for twin in twins)
        assert has_xlabel, f"{name}: an axes has no x label"
        assert axes.get_ylabel(), f"{name}: an axes has no y label"


def test_figures_reject_bad_arguments():
    with pytest.raises(ValueError, match="block_size"):
        viz.block_table_diagram(block_size=0)
    with pytest.raises(ValueError, match="physical_blocks"):
        viz.block_table_diagram(num_tokens=50, physical_blocks=(1, 2))
    with pytest.raises(ValueError, match="top_p"):
        viz.sampling_filters(top_p=1.5)
    with pytest.raises(TypeError, match="num_slots"):
        viz.batching_timeline(num_slots=2.5)
    with pytest.raises(ValueError, match="acceptance_rate"):
        viz.expected_tokens_per_verification(1.0, 4)


def test_figure_numbers_match_the_chapters():
    # The chapters quote these numbers; the formulas behind the figures must give them.
    assert viz.kv_bytes_per_token(32, 8, 128, 2) == 128 * 1024  # Llama-3-8B, fp16
    assert viz.kv_bytes_per_token(30, 3, 64, 2) == 23_040  # SmolLM2, fp16: 22.5 KiB
    assert viz.expected_tokens_per_verification(0.8, 4) == pytest.approx(3.36, abs=5e-3)
    assert float(viz.linear_layer_intensity(1)) == pytest.approx(1.0, abs=0.01)
    trace = viz._toy_bpe_trace("aaabdaaabac", 3)
    assert trace[1][0] == (97, 97)  # the first merge is "aa"
    assert trace[2][0] == (97, 98)  # the tie between "Za" and "ab" goes to the smaller pair, as in Lab 0.1
    assert [len(ids) for _, ids in trace] == [11, 9, 7, 5]


# ---- chapters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter", _chapter_files(), ids=lambda path: path.stem)
def test_chapter_has_a_figure_a_lab_link_and_glossary_terms(chapter):
    text = chapter.read_text()
    lab_ids = {entry["id"] for entry in book_command.load_lab_map(BOOK_DIR)}
    assert FIGURE_DIRECTIVE.search(text), f"{chapter.name} has no viz-figure"
    linked = set(LAB_REFERENCE.findall(text))
    assert linked & lab_ids, f"{chapter.name} links to no lab in _labs.yml"
    assert "{term}`" in text, f"{chapter.name} references no glossary term"


def test_lab_map_entries_are_valid():
    entries = book_command.load_lab_map(BOOK_DIR)
    ids = [entry["id"] for entry in entries]
    assert len(ids) == len(set(ids)), "lab ids in _labs.yml must be unique"
    assert {"lab01-text-to-tensors", "lab02-prefill-vs-decode"} <= set(ids)
    for entry in entries:
        for chapter in entry.get("chapters", []):
            assert (BOOK_DIR / "chapters" / f"{chapter}.md").is_file(), f"{entry['id']}: no chapter {chapter!r}"


# ---- labs: discovery, copy, table of contents ---------------------------------------------------


def _write_notebook(path: Path, *cells) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = list(cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)


def test_discover_labs_sorts_and_skips_folders_without_notebooks(tmp_path):
    _write_notebook(tmp_path / "lab02-b" / "02-second.ipynb")
    _write_notebook(tmp_path / "lab02-b" / "01-first.ipynb")
    _write_notebook(tmp_path / "lab01-a" / "01-only.ipynb")
    (tmp_path / "lab03-empty").mkdir()
    _write_notebook(tmp_path / ".ipynb_checkpoints" / "x.ipynb")
    labs = book_command.discover_labs(tmp_path)
    assert [lab.lab_id for lab in labs] == ["lab01-a", "lab02-b"]
    assert [p.name for p in labs[1].notebooks] == ["01-first.ipynb", "02-second.ipynb"]
    assert book_command.discover_labs(tmp_path / "missing") == []


@pytest.mark.parametrize("marker", ["### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"])
def test_sync_refuses_notebooks_with_solution_markers(tmp_path, marker):
    labs_dir, book_dir = tmp_path / "labs", tmp_path / "book"
    book_dir.mkdir()
    shutil.copy(BOOK_DIR / "_labs.yml", book_dir / "_labs.yml")
    _write_notebook(labs_dir / "lab01-text-to-tensors" / "01.ipynb",
                    nbformat.v4.new_code_cell(f"def f():\n    {marker}\n    return 1"))
    with pytest.raises(book_command.BookError, match="student release"):
        book_command.sync_labs(book_command.discover_labs(labs_dir), book_dir)


def test_sync_copies_labs_with_titles_and_index_pages(tmp_path):
    labs_dir, book_dir = tmp_path / "labs", tmp_path / "book"
    book_dir.mkdir()
    shutil.copy(BOOK_DIR / "_labs.yml", book_dir / "_labs.yml")
    _write_notebook(labs_dir / "lab01-text-to-tensors" / "01-tokenization.ipynb",
                    nbformat.v4.new_markdown_cell("# Tokenization\n\nText."))
    _write_notebook(labs_dir / "lab07-new-topic" / "01_first-steps.ipynb", nbformat.v4.new_code_cell("x = 1"))
    (book_dir / "labs" / "stale").mkdir(parents=True)
    book_command.sync_labs(book_command.discover_labs(labs_dir), book_dir)

    assert not (book_dir / "labs" / "stale").exists(), "a previous build's copy must be replaced"
    mapped = (book_dir / "labs" / "lab01-text-to-tensors" / "index.md").read_text()
    assert mapped.startswith("# Lab 0.1: From text to tensors")
    unmapped = (book_dir / "labs" / "lab07-new-topic" / "index.md").read_text()
    assert unmapped.startswith("# lab07: new topic")
    copied = nbformat.read(book_dir / "labs" / "lab07-new-topic" / "01_first-steps.ipynb", as_version=4)
    assert copied.cells[0].source == "# First steps", "an untitled notebook gets a title cell"
    assert copied.metadata["language_info"]["name"] == "python"
    original = nbformat.read(labs_dir / "lab07-new-topic" / "01_first-steps.ipynb", as_version=4)
    assert len(original.cells) == 1, "the release itself is never modified"


def test_a_lab_page_lists_its_written_questions_as_released_without_their_model_answers(tmp_path):
    from autograde.knowledge import load_lab
    from autograde.knowledge.leaks import find_answer_leaks, given_text

    book_dir = tmp_path / "book"
    book_dir.mkdir()
    shutil.copy(BOOK_DIR / "_labs.yml", book_dir / "_labs.yml")
    labs = [lab for lab in book_command.discover_labs(REPO_ROOT / "labs") if lab.lab_id == "lab02-prefill-vs-decode"]
    book_command.sync_labs(labs, book_dir)
    page = (book_dir / "labs" / "lab02-prefill-vs-decode" / "index.md").read_text()
    questions = load_lab("lab02-prefill-vs-decode")
    assert "## Written questions" in page and "{doc}`/instructor-guide`" in page
    assert page.count(" points)\n") == len(questions.questions)
    assert "**Lab 0.2 · Chapter 3 — Decode: one token at a time** (5 points)" in page
    for question in questions.questions:
        assert question.prompt.splitlines()[0] in page
    assert find_answer_leaks(book_dir / "labs" / "lab02-prefill-vs-decode" / "index.md", [questions],
                             given=given_text(REPO_ROOT / "solutions")) == []


def test_toc_gets_labs_only_when_there_are_some(tmp_path):
    toc_path = tmp_path / "toc.yml"
    book_command.write_toc(BOOK_DIR, [], toc_path)
    empty = yaml.safe_load(toc_path.read_text())
    assert empty == yaml.safe_load((BOOK_DIR / "_toc.yml").read_text())

    labs = [book_command.Lab("lab01-text-to-tensors", (Path("01-tokenization.ipynb"), Path("02-kv.ipynb")))]
    book_command.write_toc(BOOK_DIR, labs, toc_path)
    toc = yaml.safe_load(toc_path.read_text())
    labs_page = next(c for part in toc["parts"] for c in part["chapters"] if c["file"] == "labs")
    assert labs_page["sections"] == [{
        "file": "labs/lab01-text-to-tensors/index",
        "sections": [{"file": "labs/lab01-text-to-tensors/01-tokenization"},
                     {"file": "labs/lab01-text-to-tensors/02-kv"}],
    }]


# ---- the built site ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def built_book():
    """Build the book once with `course book`; returns (html folder, build log)."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "autograde.cli", "book"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"course book failed (exit {result.returncode}):\n{log[-6000:]}"
    print(f"book built in {time.perf_counter() - started:.0f} s")
    return HTML_DIR, log


def _released_lab_pages() -> list[str]:
    """Site paths of the lab notebooks this build renders, e.g. 'labs/lab01-text-to-tensors/01_x.html'."""
    return [f"labs/{lab.lab_id}/{notebook.stem}.html"
            for lab in book_command.discover_labs(REPO_ROOT / "labs") for notebook in lab.notebooks]


@pytest.mark.slow
def test_book_builds_without_warnings(built_book):
    html_dir, log = built_book
    assert "WARNING" not in log, log[-4000:]
    assert (html_dir / "index.html").is_file()
    for chapter in _chapter_files():
        assert (html_dir / "chapters" / f"{chapter.stem}.html").is_file()
    for page in _released_lab_pages():
        assert (html_dir / page).is_file(), f"released lab page {page} was not built"


@pytest.mark.slow
def test_no_solution_or_hidden_test_in_the_site(built_book):
    html_dir, _ = built_book
    scanned = 0
    for path in html_dir.rglob("*"):
        if path.is_file() and path.suffix in {".html", ".ipynb", ".md", ".txt", ".js", ".json"}:
            text = path.read_text(errors="replace")
            scanned += 1
            for marker in LEAK_MARKERS:
                assert marker not in text, f"{path.relative_to(html_dir)} contains {marker!r}"
    assert scanned > 20


class _LinkCollector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.links.append(value)


def _parse(path: Path) -> _LinkCollector:
    collector = _LinkCollector()
    collector.feed(path.read_text(errors="replace"))
    return collector


@pytest.mark.slow
def test_no_broken_internal_link(built_book):
    html_dir, _ = built_book
    # _static/ holds the theme's Jinja snippets (*.html templates), not pages.
    pages = sorted(page for page in html_dir.rglob("*.html") if "_static" not in page.relative_to(html_dir).parts)
    parsed = {page: _parse(page) for page in pages}
    broken, checked = [], 0
    for page, collector in parsed.items():
        for link in collector.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:", "data:")):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)} -> {link}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if parts.fragment not in ids:
                    broken.append(f"{page.relative_to(html_dir)} -> {link} (no such anchor)")
    assert checked > 500
    assert not broken, "broken internal links:\n" + "\n".join(broken[:40])


@pytest.mark.slow
def test_site_loads_nothing_from_the_network(built_book):
    html_dir, _ = built_book
    external = re.compile(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)
    offenders = [str(page.relative_to(html_dir)) for page in html_dir.rglob("*.html")
                 if external.search(page.read_text(errors="replace"))]
    assert not offenders, f"pages that load scripts, styles or images from the network: {offenders[:10]}"


@pytest.mark.slow
def test_search_index_is_built(built_book):
    html_dir, _ = built_book
    index = (html_dir / "searchindex.js").read_text()
    assert index.startswith("Search.setIndex(")
    for word in ("prefil", "paged", "goodput"):  # Sphinx stores stemmed words
        assert word in index
    assert (html_dir / "search.html").is_file()


# ---- the built site in headless Chromium ----------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def site_url(built_book):
    """The built site served on 127.0.0.1 from a thread, on a free port; shut down afterwards."""
    html_dir, _ = built_book
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(html_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
        f"--user-data-dir={profile}", "--hide-scrollbars", "--virtual-time-budget=10000", *extra, url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def _dump_dom(url: str, tmp_path: Path) -> str:
    result = _chromium(url, tmp_path / "profile-dom", "--dump-dom")
    assert result.returncode == 0 and "<html" in result.stdout, f"chromium could not load {url}: {result.stderr[-2000:]}"
    return result.stdout


def _screenshot(url: str, tmp_path: Path, name: str):
    from PIL import Image

    path = tmp_path / f"{name}.png"
    result = _chromium(url, tmp_path / "profile-shot", "--window-size=1280,1600", f"--screenshot={path}")
    assert result.returncode == 0 and path.is_file(), f"no screenshot of {url}: {result.stderr[-2000:]}"
    with Image.open(path) as image:
        assert image.size == (1280, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is None or len(colours) > 50, f"the screenshot of {url} looks blank"
    return path


def _visible_text(dom: str) -> str:
    """The page's text without tags (code highlighting splits words into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", dom))


def _article_images(dom: str) -> list[str]:
    article = dom[dom.find("<article"):dom.find("</article>")]
    return re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", article)


def _check_page(site_url: str, html_dir: Path, page: str, title: str, tmp_path: Path, *, needs_figure: bool):
    from PIL import Image

    url = f"{site_url}/{page}"
    dom = _dump_dom(url, tmp_path)
    head_title = re.search(r"<title>(.*?)</title>", dom, re.DOTALL).group(1)
    assert title in html.unescape(head_title), f"{page}: title {head_title!r} lacks {title!r}"
    article = dom[dom.find("<article"):dom.find("</article>")]
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", article, re.DOTALL)
    assert heading and title in _visible_text(heading.group(1)), f"{page}: the article's heading is not {title!r}"
    images = _article_images(dom)
    if needs_figure:
        assert images, f"{page} shows no figure"
    for src in images:
        image_path = (html_dir / page).parent / unquote(urlsplit(src).path)
        with Image.open(image_path) as image:
            assert image.width > 300 and image.height > 150, f"{src} is too small to be a figure"
    return _screenshot(url, tmp_path, page.replace("/", "_").removesuffix(".html"))


@pytest.mark.slow
@needs_chromium
def test_landing_page_renders_in_chromium(built_book, site_url, tmp_path):
    html_dir, _ = built_book
    shot = _check_page(site_url, html_dir, "intro.html", "LLM Inference Systems", tmp_path, needs_figure=True)
    text = _visible_text(_dump_dom(f"{site_url}/intro.html", tmp_path))
    for expected in ("make demo", "make test", "Map of the labs", "Lab 0.1: From text to tensors",
                     "Lab 0.2: Prefill vs decode", "What runs on a CPU and what needs a GPU"):
        assert expected in text, f"the landing page lacks {expected!r}"
    print(f"screenshot: {shot}")


@pytest.mark.slow
@needs_chromium
def test_lab_page_renders_in_chromium(built_book, site_url, tmp_path):
    """A released lab notebook when there is one; otherwise a chapter (there is no lab to show yet)."""
    html_dir, _ = built_book
    lab_pages = _released_lab_pages()
    if lab_pages:
        page = lab_pages[0]
        head_title = re.search(r"<title>(.*?)</title>", (html_dir / page).read_text(), re.DOTALL).group(1)
        title = html.unescape(head_title).rsplit(" — ", 1)[0].strip()  # "<page> — <book>"
        shot = _check_page(site_url, html_dir, page, title, tmp_path, needs_figure=False)
        dom = _dump_dom(f"{site_url}/{page}", tmp_path)
        assert "YOUR CODE HERE" in _visible_text(dom), "a released lab shows its answer stubs"
    else:
        shot = _check_page(site_url, html_dir, "chapters/paging.html", "Paging the KV cache", tmp_path,
                           needs_figure=True)
    print(f"screenshot: {shot}")


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("origin", ["http", "file"])
def test_search_works_offline(built_book, site_url, tmp_path, origin):
    html_dir, _ = built_book
    base = site_url if origin == "http" else (html_dir.resolve().as_uri())
    dom = _dump_dom(f"{base}/search.html?q=prefill", tmp_path)
    results = re.search(r"<ul class=\"search\">(.*?)</ul>", dom, re.DOTALL)
    assert results, f"the search page ran no search ({origin})"
    assert "prefill-vs-decode.html" in results.group(1) or "chunked-prefill.html" in results.group(1)
