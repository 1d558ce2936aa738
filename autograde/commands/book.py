"""``course book``: build the book site (book/_build/html) from the chapters and the released labs.

What a build does, in order:

1. Finds the released labs: every folder ``labs/<lab>/`` holding notebooks (the student release
   that ``course release`` writes; never ``solutions/``).
2. Copies them into the book's source tree as ``book/labs/<lab>/`` (ignored by git), refusing any
   notebook that still carries solution or hidden-test markers, and writes a small index page per
   lab from ``book/_labs.yml``.
3. Writes ``book/_build/toc.yml``: the committed ``book/_toc.yml`` with those labs added under the
   Labs page. Adding a lab is therefore automatic; a line in ``_labs.yml`` gives it a title and time.
4. Runs Jupyter Book 1 (Sphinx) with warnings as errors. Notebooks are rendered as released, not
   executed, so the build takes seconds; the chapters' figures are drawn by ``course_lib.viz``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import http.server
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

HELP = "Build the book site (book/_build/html), optionally serving it on localhost."
DESCRIPTION = """\
Build the course book with Jupyter Book 1 into book/_build/html, treating every Sphinx warning
as an error (exit code 0 only when the build is clean).

The released labs (labs/<lab>/*.ipynb) are copied into the book at build time and rendered as
released: they are not executed, and a notebook that still contains solution or hidden-test
markers stops the build. Figures in the chapters are drawn by course_lib.viz during the build.

examples:
  course book                 build the site
  course book --serve         build, then serve it on http://127.0.0.1:8000/
  course book --no-labs       chapters only (faster while writing)
"""

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOK_DIR = REPO_ROOT / "book"
LABS_DIR = REPO_ROOT / "labs"

# Markers that nbgrader removes when it makes the student release. Built from parts so that this
# file itself never contains them verbatim (the book's tests scan for the full strings).
FORBIDDEN_MARKERS = tuple(
    f"{prefix} {kind}" for prefix in ("BEGIN", "END") for kind in ("SOLUTION", "HIDDEN TESTS", "MARK SCHEME")
)


class BookError(RuntimeError):
    """A problem with the book's inputs (a lab that is not a clean release, a missing file)."""


@dataclass(frozen=True)
class Lab:
    """One released lab: its folder name (the id used in _labs.yml) and its notebooks, in order."""

    lab_id: str
    notebooks: tuple[Path, ...]


def load_lab_map(book_dir: Path) -> list[dict]:
    """The entries of ``book_dir/_labs.yml``: id, title, hours, runs_on, summary, and optionally planned."""
    path = book_dir / "_labs.yml"
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    for entry in entries:
        missing = {"id", "title", "hours", "runs_on", "summary"} - set(entry)
        if missing:
            raise BookError(f"{path}: entry {entry.get('id', entry)!r} lacks {sorted(missing)}")
    return entries


def title_from_lab_id(lab_id: str) -> str:
    """A readable title for a lab that _labs.yml does not list: 'lab03-kv-offload' -> 'lab03: kv offload'."""
    head, _, rest = lab_id.partition("-")
    return f"{head}: {rest.replace('-', ' ')}" if rest else lab_id


def discover_labs(labs_dir: Path) -> list[Lab]:
    """Every folder of ``labs_dir`` that holds at least one notebook, sorted by name.

    Notebooks are sorted by file name, so ``01-tokenizer.ipynb`` comes before ``02-embeddings.ipynb``.
    Hidden folders and Jupyter checkpoints are skipped. A missing ``labs_dir`` means no labs.
    """
    if not labs_dir.is_dir():
        return []
    labs = []
    for folder in sorted(p for p in labs_dir.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        notebooks = tuple(sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith(".")))
        if notebooks:
            labs.append(Lab(folder.name, notebooks))
    return labs


def check_release_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a released notebook and refuse it if it still carries solution or hidden-test markers."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises several types for unreadable JSON
        raise BookError(f"{path}: not a readable notebook ({type(error).__name__}: {error})") from error
    for index, cell in enumerate(notebook.cells):
        for marker in FORBIDDEN_MARKERS:
            if marker in cell.source:
                raise BookError(
                    f"{path}: cell {index} contains {marker!r}. labs/ must hold the student release "
                    "(run `course release`), never the solution notebooks."
                )
    return notebook


def _has_title(notebook: nbformat.NotebookNode) -> bool:
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.strip():
            return cell.source.lstrip().startswith("# ")
    return False


def _page_title(path: Path) -> str:
    stem = path.stem.lstrip("0123456789-_ ")
    return (stem or path.stem).replace("-", " ").replace("_", " ").capitalize()


def _lab_index_page(lab: Lab, entry: dict | None) -> str:
    from_map = entry is not None
    title = entry["title"] if from_map else title_from_lab_id(lab.lab_id)
    lines = [f"# {title}", ""]
    if from_map:
        lines += [entry["summary"], "", f"Estimated time: about {entry['hours']} hours. Runs on: {entry['runs_on']}.", ""]
        chapters = entry.get("chapters") or []
        if chapters:
            links = ", ".join(f"{{doc}}`/chapters/{name}`" for name in chapters)
            lines += [f"Chapters to read with this lab: {links}.", ""]
    lines += [
        f"The notebooks below are the student release of `labs/{lab.lab_id}/`, shown as released (not run).",
        "Open them in JupyterLab to work on them; see {doc}`/labs` for how the labs fit together.",
        "",
    ]
    lines += _written_questions_section(lab)
    lines += ["```{tableofcontents}", "```", ""]
    return "\n".join(lines)


def _notebook_title(cells) -> str:
    """The first Markdown heading of a notebook ("Lab 0.1 · Chapter 3 — The KV cache"), or ""."""
    first = next((cell.source for cell in cells if cell.cell_type == "markdown"), "")
    heading = next((line[2:].strip() for line in first.splitlines() if line.startswith("# ")), "")
    return heading


def _written_questions_section(lab: Lab) -> list[str]:
    """The lab's written questions as its release asks them (a prompt cell before each written answer
    cell), with their points: what a student answers in words and a TA grades with a rubric."""
    from course_lib.handin.notebooks import is_written_answer, nbgrader_meta

    found = []
    for path in lab.notebooks:
        cells = nbformat.read(path, as_version=4).cells
        for before, cell in zip(cells, cells[1:]):
            if is_written_answer(cell) and nbgrader_meta(before).get("grade_id") == f"{nbgrader_meta(cell)['grade_id']}_prompt":
                prompt = re.sub(r"^\*\*Written question \([^)]*\)\.\*\*\s*", "", before.source)
                found.append((_notebook_title(cells) or _page_title(path), float(nbgrader_meta(cell).get("points") or 0),
                              prompt.strip()))
    if not found:
        return []
    lines = ["## Written questions", "",
             "Besides its code, most chapters below ask questions answered in words, each in the cell under it. A TA "
             "grades each answer with a rubric (criteria with points and partial credit) after the lab is handed "
             "in; the feedback shows the criteria met and the TA's comment once the instructor releases the marks "
             "(the {doc}`/instructor-guide` says how they are graded).", ""]
    for title, points, prompt in found:
        lines += [f"**{title}** ({points:g} points)", ""]
        lines += [f"> {line}" if line else ">" for line in prompt.splitlines()]
        lines.append("")
    return lines


def sync_labs(labs: list[Lab], book_dir: Path) -> None:
    """Copy the released labs into ``book_dir/labs/`` (replacing what a previous build left there).

    Each notebook is checked for solution markers; one without a ``# Title`` in its first markdown
    cell gets a title cell made from its file name (only in the copy), so the navigation never shows
    an untitled page, and one without kernel metadata is marked as Python (for code highlighting).
    Each lab gets an ``index.md`` built from its ``_labs.yml`` entry.
    """
    target_root = book_dir / "labs"
    if target_root.exists():
        shutil.rmtree(target_root)
    if not labs:
        return
    lab_map = {entry["id"]: entry for entry in load_lab_map(book_dir)}
    for lab in labs:
        target = target_root / lab.lab_id
        target.mkdir(parents=True)
        for source in lab.notebooks:
            notebook = check_release_notebook(source)
            if not _has_title(notebook):
                notebook.cells.insert(0, nbformat.v4.new_markdown_cell(f"# {_page_title(source)}"))
            # Code cells are highlighted by the notebook's language; every lab is Python.
            notebook.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
            notebook.metadata.setdefault("language_info", {"name": "python"})
            nbformat.write(notebook, target / source.name)
        (target / "index.md").write_text(_lab_index_page(lab, lab_map.get(lab.lab_id)), encoding="utf-8")


def write_toc(book_dir: Path, labs: list[Lab], toc_path: Path) -> Path:
    """Write the committed ``_toc.yml`` with the labs added as sections of the ``labs`` page."""
    toc = yaml.safe_load((book_dir / "_toc.yml").read_text(encoding="utf-8"))
    toc = copy.deepcopy(toc)
    labs_page = next(
        (chapter for part in toc.get("parts", []) for chapter in part.get("chapters", []) if chapter.get("file") == "labs"),
        None,
    )
    if labs_page is None:
        raise BookError(f"{book_dir / '_toc.yml'} has no chapter `file: labs` to hang the labs under")
    if labs:
        labs_page["sections"] = [
            {
                "file": f"labs/{lab.lab_id}/index",
                "sections": [{"file": f"labs/{lab.lab_id}/{notebook.stem}"} for notebook in lab.notebooks],
            }
            for lab in labs
        ]
    toc_path.parent.mkdir(parents=True, exist_ok=True)
    toc_path.write_text("# Generated by `course book` from _toc.yml and labs/; do not edit.\n"
                        + yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    return toc_path


def jupyter_book_command(book_dir: Path, toc_path: Path, *, keep_going: bool) -> list[str]:
    """The jupyter-book call: full rebuild, warnings as errors, nitpicky references, HTML."""
    executable = Path(sys.executable).with_name("jupyter-book")
    found = str(executable) if executable.exists() else shutil.which("jupyter-book")
    if found is None:
        raise BookError("jupyter-book is not installed; install the book extra: pip install -e '.[book]'")
    command = [found]
    command += ["build", str(book_dir), "--toc", str(toc_path), "--builder", "html", "--all", "-W", "-n"]
    if keep_going:
        command.append("--keep-going")
    return command


def build_book(
    book_dir: Path = BOOK_DIR,
    labs_dir: Path = LABS_DIR,
    *,
    include_labs: bool = True,
    keep_going: bool = False,
) -> int:
    """Build the site into ``book_dir/_build/html``; returns the exit code (0 only for a clean build)."""
    if not (book_dir / "_config.yml").is_file():
        raise BookError(f"{book_dir} is not a Jupyter Book folder (no _config.yml)")
    labs = discover_labs(labs_dir) if include_labs else []
    # A fresh output folder: Sphinx never deletes pages, so a removed lab would otherwise linger.
    for stale in (book_dir / "_build" / "html", book_dir / "_build" / ".doctrees"):
        if stale.exists():
            shutil.rmtree(stale)
    sync_labs(labs, book_dir)
    toc_path = write_toc(book_dir, labs, book_dir / "_build" / "toc.yml")
    names = ", ".join(lab.lab_id for lab in labs) or "none"
    print(f"course book: labs in this build: {names}", flush=True)
    command = jupyter_book_command(book_dir, toc_path, keep_going=keep_going)
    print("course book: " + " ".join(command), flush=True)
    result = subprocess.run(command, cwd=book_dir.parent)
    index = book_dir / "_build" / "html" / "index.html"
    if result.returncode != 0 or not index.is_file():
        print(f"course book: FAILED (exit code {result.returncode}); the first warning above is the cause",
              file=sys.stderr)
        return result.returncode or 1
    print(f"course book: built {index}")
    return 0


def serve(directory: Path, port: int) -> None:
    """Serve ``directory`` on http://127.0.0.1:port/ until Ctrl-C (port 0 picks a free port)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"course book: serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("\ncourse book: stopped")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--serve", action="store_true", help="after a successful build, serve the site on localhost")
    parser.add_argument("--port", type=int, default=8000, help="port for --serve (default 8000; 0 = any free port)")
    parser.add_argument("--no-labs", action="store_true", help="build the chapters only, without the released labs")
    parser.add_argument("--keep-going", action="store_true",
                        help="report every warning before failing, instead of stopping at the first")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        print(f"course book: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        code = build_book(include_labs=not args.no_labs, keep_going=args.keep_going)
    except BookError as error:
        print(f"course book: {error}", file=sys.stderr)
        return 1
    if code == 0 and args.serve:
        serve(BOOK_DIR / "_build" / "html", args.port)
    return code
