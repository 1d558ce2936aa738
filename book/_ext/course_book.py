"""Sphinx extension for the course book: figures drawn by ``course_lib.viz`` and the map of labs.

Two directives, usable from MyST markdown:

``viz-figure``
    ```{viz-figure} kv_cache_size_vs_context
    :kwargs: {"batch_sizes": [1, 64]}

    Caption text.
    ```
    calls ``course_lib.viz.kv_cache_size_vs_context(**kwargs)`` while the page is read, saves the
    returned matplotlib figure as a PNG under ``_generated/figures/`` in the book's source tree,
    and then behaves exactly like Sphinx's ``figure`` directive (``:alt:``, ``:width:``, ``:name:``
    and a caption). Nothing is drawn by hand and no image is committed.

``lab-map``
    A table of the labs listed in ``_labs.yml`` plus any lab the build found under ``labs/``
    (``course book`` copies the student release there and writes ``labs/<id>/index.md``). A lab that
    is in this build gets a link; a planned one says so. With ``:labels:`` each row also defines a
    reference label named after the lab id, so chapters can write ``{ref}`Lab 0.1 <lab01-text-to-tensors>```.

It also makes math render without a network (MathJax from the jupyter-server-mathjax package).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import time
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from sphinx import addnodes
from sphinx.directives.patches import Figure
from sphinx.util import logging

from autograde.commands.book import load_lab_map, title_from_lab_id

logger = logging.getLogger(__name__)

FIGURE_DIR = Path("_generated") / "figures"
LAB_MAP_FILE = "_labs.yml"  # read by autograde.commands.book.load_lab_map


def _render_viz_figure(srcdir: Path, function_name: str, kwargs: dict) -> Path:
    """Call course_lib.viz.<function_name>(**kwargs) and save the figure; returns the PNG path in srcdir."""
    viz = importlib.import_module("course_lib.viz")
    function = getattr(viz, function_name, None)
    if function is None or not callable(function):
        raise ValueError(f"course_lib.viz has no figure function named {function_name!r}")
    # One file per (function, arguments): the same figure drawn twice with other arguments gets its own file.
    suffix = hashlib.sha1(json.dumps(kwargs, sort_keys=True).encode()).hexdigest()[:8] if kwargs else ""
    path = srcdir / FIGURE_DIR / (f"{function_name}-{suffix}.png" if suffix else f"{function_name}.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    figure = function(**kwargs)
    figure.savefig(path, dpi=110)
    logger.info(f"viz-figure {function_name}: {time.process_time() - started:.2f} s CPU")
    return path


class VizFigure(Figure):
    """A ``figure`` whose image is drawn by a ``course_lib.viz`` function at build time."""

    option_spec = {**Figure.option_spec, "kwargs": directives.unchanged}

    def run(self):
        env = self.state.document.settings.env
        function_name = self.arguments[0]
        try:
            kwargs = json.loads(self.options.pop("kwargs", "{}"))
        except json.JSONDecodeError as error:
            raise self.error(f"viz-figure {function_name}: :kwargs: must be a JSON object ({error})") from error
        if not isinstance(kwargs, dict):
            raise self.error(f"viz-figure {function_name}: :kwargs: must be a JSON object, got {kwargs!r}")
        rendered = env.app.course_book_rendered  # (function, kwargs) -> path, shared by the whole build
        key = (function_name, json.dumps(kwargs, sort_keys=True))
        if key not in rendered:
            try:
                rendered[key] = _render_viz_figure(Path(env.srcdir), function_name, kwargs)
            except Exception as error:  # any failure of a figure function is a build error on this page
                raise self.error(f"viz-figure {function_name} failed: {type(error).__name__}: {error}") from error
        # A leading "/" makes Sphinx resolve the image relative to the book's source directory.
        self.arguments = ["/" + rendered[key].relative_to(env.srcdir).as_posix()]
        self.options.setdefault("alt", f"figure drawn by course_lib.viz.{function_name}")
        return super().run()


class LabMap(Directive):
    """Table of the labs: title (linked when released in this build), what you build, time, where it runs."""

    has_content = False
    option_spec = {"labels": directives.flag}

    def run(self):
        env = self.state.document.settings.env
        srcdir = Path(env.srcdir)
        env.note_dependency(str(srcdir / LAB_MAP_FILE))
        entries = load_lab_map(srcdir)
        listed = {entry["id"] for entry in entries}
        released = sorted(
            docname.split("/")[1]
            for docname in env.found_docs
            if docname.startswith("labs/") and docname.endswith("/index") and docname.count("/") == 2
        )
        for lab_id in released:
            if lab_id not in listed:
                entries.append({"id": lab_id, "title": title_from_lab_id(lab_id), "hours": "?",
                                "runs_on": "see the lab", "summary": "A lab without an entry in _labs.yml yet."})
        make_labels = "labels" in self.options

        table = nodes.table(classes=["lab-map"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (28, 50, 8, 14):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += self._row([nodes.Text(text) for text in ("Lab", "What you build", "Time", "Runs on")])
        group += head
        body = nodes.tbody()
        group += body
        for entry in entries:
            lab_id = entry["id"]
            title_cell = nodes.paragraph()
            if make_labels:
                target = nodes.target("", "", ids=[nodes.make_id(lab_id)], names=[nodes.fully_normalize_name(lab_id)])
                self.state.document.note_explicit_target(target, target)
                title_cell += target
            if lab_id in released:
                link = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget=f"/labs/{lab_id}/index",
                                             refexplicit=True, refwarn=True)
                link += nodes.inline(text=entry["title"])
                title_cell += link
            else:
                title_cell += nodes.strong(text=entry["title"])
                status = "planned" if entry.get("planned") else "not released yet"
                title_cell += nodes.Text(f" ({status})")
            hours = entry["hours"]
            body += self._row([title_cell, nodes.Text(entry["summary"]),
                               nodes.Text(f"~{hours} h" if hours != "?" else "?"), nodes.Text(entry["runs_on"])])
        return [table]

    @staticmethod
    def _row(cells) -> nodes.row:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += cell if isinstance(cell, nodes.paragraph) else nodes.paragraph("", "", cell)
            row += entry
        return row


def _reset_rendered(app) -> None:
    app.course_book_rendered = {}


# ---- Math without a network -------------------------------------------------------------------
# Sphinx loads MathJax from a CDN by default, so an offline reader would see raw TeX. The
# jupyter-server-mathjax package ships MathJax 2 as plain files: when it is installed, the book
# copies them into _static/mathjax and points Sphinx there.

# The package ships the "-full" combined configuration only (TeX and MathML in, HTML-CSS out).
LOCAL_MATHJAX = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
# Classes that MyST gives its math nodes; everything else on the page is left alone.
MATH_CLASSES = "tex2jax_process|mathjax_process|math|output_area"


def _local_mathjax_dir() -> Path | None:
    try:
        package = importlib.import_module("jupyter_server_mathjax")
    except ImportError:
        return None
    static = Path(package.__file__).parent / "static"
    return static if (static / "MathJax.js").is_file() else None


def _use_local_mathjax(app, config) -> None:
    if _local_mathjax_dir() is None:
        logger.info("course_book: jupyter-server-mathjax is not installed; math loads MathJax from its CDN")
        return
    config.mathjax_path = LOCAL_MATHJAX
    config.mathjax2_config = {
        "tex2jax": {"processClass": MATH_CLASSES, "ignoreClass": "tex2jax_ignore|mathjax_ignore"},
        # The package ships one web font, STIX-Web; MathJax must not ask for its default TeX fonts.
        "HTML-CSS": {"availableFonts": ["STIX-Web"], "preferredFont": "STIX-Web", "webFont": "STIX-Web",
                     "imageFont": None},
    }
    config.mathjax3_config = None
    config.myst_update_mathjax = False  # MyST would otherwise write a MathJax 3 configuration


def _copy_local_mathjax(app, exception) -> None:
    source = _local_mathjax_dir()
    if exception is not None or source is None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("unpacked", "*.md"))


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("builder-inited", _reset_rendered)
    app.connect("build-finished", _copy_local_mathjax)
    app.add_directive("viz-figure", VizFigure)
    app.add_directive("lab-map", LabMap)
    return {"version": "1.0", "parallel_read_safe": False, "parallel_write_safe": True}
