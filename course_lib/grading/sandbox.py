"""Where a student's kernel runs: a sandbox that hides the instructor's files and the network.

The grader starts each student kernel through the strongest isolation the machine offers:

- ``bubblewrap`` (``bwrap``, Debian package ``bubblewrap``): a read-only view of the file system in
  which the instructor's files are replaced by empty folders, a private ``/tmp``, only the
  submission's own folder writable, no network (a new network namespace has only a loopback
  device), its own process tree, and every capability dropped, so the kernel cannot unmount what
  hides the instructor's files;
- ``unshare`` (util-linux) as root, when bubblewrap is missing: the same namespaces and mounts,
  made by a small shell script, and capabilities dropped with ``setpriv`` before Python starts;
- none: the kernel still imports only the student edition, runs in a scratch folder with a scrubbed
  environment, and its test cells still run in the grader; but it could read files the grader's
  user can read. ``course grade`` says so.

Hidden: every top-level folder but the system's own (``/usr``, ``/etc``, ``/lib``...; see
``SYSTEM_FOLDERS``), so not only the grading workspace (the source notebooks with hidden tests, the
gradebook), the output and submissions folders, the course repository and the home folders, but
also any other copy of the course on the machine (another checkout, last term's grading folder);
and the installed instructor ``course_lib`` wherever it lives. What the kernel needs comes back
read-only: the Python installation (even inside a hidden folder, such as a virtual environment in
the course repository), the student edition and the grader's disk cache of public artifacts (the
corpus, the dequantized model: ``shared_cache``); the submission's folder comes back writable. GPU
device files stay reachable on a GPU worker.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["Isolation", "SandboxPlan", "default_plan", "detect_isolation", "kernel_environment", "shared_cache",
           "wrap_command"]

BUBBLEWRAP, UNSHARE, NONE = "bubblewrap", "unshare", "none"


@dataclass(frozen=True)
class Isolation:
    """The isolation a machine offers, and a sentence that says what it means."""

    name: str
    description: str


@dataclass
class SandboxPlan:
    """What one kernel may see.

    hidden: folders (or files) replaced by empty ones; visible_inside: paths under a hidden folder
    that must stay readable (the Python installation); readable: extra read-only paths (the student
    edition); writable: the kernel's working folder.
    """

    hidden: list[Path] = field(default_factory=list)
    visible_inside: list[Path] = field(default_factory=list)
    readable: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)


# Top-level folders a Python process needs, kept (read-only); every other top-level folder is hidden.
SYSTEM_FOLDERS = frozenset({"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "nix", "proc", "sbin", "sys",
                            "tmp", "usr"})


def _non_system_folders(root: Path = Path("/")) -> list[Path]:
    """Top-level folders outside SYSTEM_FOLDERS (symbolic links left alone: they point into kept ones)."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [path for path in entries
            if path.name not in SYSTEM_FOLDERS and not path.is_symlink() and path.is_dir()]


def _gpu_devices() -> list[Path]:
    """NVIDIA device files (bubblewrap's fresh /dev lacks them; a GPU kernel needs them)."""
    return sorted(Path("/dev").glob("nvidia*"))


def _python_prefixes() -> list[Path]:
    """Folders the kernel's Python needs: the interpreter's installation and the environment's."""
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}
    return sorted(prefixes)


def shared_cache() -> Path | None:
    """The grader's disk cache (``course_lib.disk_cache``), made if missing; None if it cannot be.

    Kernels read the corpus and the dequantized model from it, as the grader does, instead of
    spending seconds making their own copies; the sandbox shows it to them read-only, so no
    submission can change what the grader (or the next kernel) reads there. Without a sandbox a
    kernel runs as the grader's user and could write it, as it could the installed library.
    """
    from course_lib.disk_cache import cache_folder

    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder.resolve() if folder.is_dir() else None


def default_plan(*, workdir: Path, edition: Path, extra_hidden: list[Path], cache: Path | None = None) -> SandboxPlan:
    """The plan for one kernel: hide the instructor's side, keep Python, the edition (and the shared
    ``cache``) read-only, and the workdir writable."""
    import course_lib

    instructor_package = Path(course_lib.__file__).resolve().parent
    hidden = [Path(p).resolve() for p in extra_hidden if p]
    hidden.append(instructor_package.parent if (instructor_package.parent / "solutions").is_dir()
                  else instructor_package)
    hidden += _non_system_folders()
    home = Path.home()
    if home != Path("/"):
        hidden.append(home.resolve())
    if Path("/root").exists():
        hidden.append(Path("/root"))
    unique: list[Path] = []
    for path in hidden:
        if path not in unique and path != Path("/"):
            unique.append(path)
    readable = [edition.resolve()] + ([cache.resolve()] if cache is not None else [])
    return SandboxPlan(hidden=unique, visible_inside=_python_prefixes(), readable=readable,
                       writable=[workdir.resolve()])


def _works(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@lru_cache(maxsize=1)
def detect_isolation() -> Isolation:
    """Try bubblewrap, then unshare, on this machine; the first that really starts a process wins."""
    if os.environ.get("COURSE_SANDBOX", "").lower() == NONE:
        return Isolation(NONE, "no sandbox (COURSE_SANDBOX=none): kernels could read what the grader's user can")
    bwrap = shutil.which("bwrap")
    if bwrap and _works([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                         "--unshare-pid", "--cap-drop", "ALL", "--die-with-parent", "true"]):
        return Isolation(BUBBLEWRAP, "bubblewrap: instructor files hidden, read-only system, private /tmp, "
                                     "no network, own process tree, no capabilities")
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare and setpriv and os.geteuid() == 0 and _works(
            [unshare, "--net", "--pid", "--fork", "--mount", "--mount-proc", "true"]):
        return Isolation(UNSHARE, "unshare: instructor files hidden, private /tmp, no network, own process tree, "
                                  "capabilities dropped")
    return Isolation(NONE, "no sandbox available (install bubblewrap): kernels run in a scratch folder with the "
                           "student edition, but could read files the grader's user can read")


def wrap_command(command: list[str], plan: SandboxPlan, isolation: Isolation, *, workdir: Path) -> list[str]:
    """``command`` (the kernel's Python command line) run inside the sandbox of ``isolation``."""
    if isolation.name == BUBBLEWRAP:
        return _bubblewrap(command, plan, workdir)
    if isolation.name == UNSHARE:
        return _unshare(command, plan, workdir)
    return command


def _covered(path: Path, folders: list[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def _bubblewrap(command: list[str], plan: SandboxPlan, workdir: Path) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--unshare-net",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for device in _gpu_devices():
        args += ["--dev-bind", str(device), str(device)]
    hidden = [path for path in plan.hidden if path.exists()]
    for path in hidden:
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    # Python may live inside a hidden folder (a virtual environment in the course repository):
    # bring it back, read-only, then hide the instructor package again if it was installed there.
    for path in plan.visible_inside:
        if _covered(path, hidden) or _covered(path, [Path("/tmp")]):
            args += ["--ro-bind", str(path), str(path)]
    for path in hidden:
        if any(_covered(path, [inside]) for inside in plan.visible_inside) and path.is_dir():
            args += ["--tmpfs", str(path)]
    for path in plan.readable:
        args += ["--ro-bind", str(path), str(path)]
    for path in plan.writable:
        args += ["--bind", str(path), str(path)]
    return args + ["--chdir", str(workdir), "--", *command]


def _unshare(command: list[str], plan: SandboxPlan, workdir: Path) -> list[str]:
    """The same view with ``unshare`` and ``mount`` in a shell script (needs root)."""
    quote = shlex.quote
    lines = ["set -e", "mount --make-rprivate /", "stash=$(mktemp -d /dev/shm/course-stash.XXXXXX)"]
    keep = [path for path in [*plan.visible_inside, *plan.readable, *plan.writable]
            if _covered(path, plan.hidden) or _covered(path, [Path("/tmp")])]
    # Park what must stay visible, cover the hidden folders, then put the parked paths back.
    for index, path in enumerate(keep):
        lines += [f"mkdir -p $stash/{index}", f"mount --bind {quote(str(path))} $stash/{index}"]
    # Cover the outermost hidden folders (a folder inside one already covered no longer exists).
    outermost = [path for path in plan.hidden + [Path("/tmp")]
                 if not any(other != path and other in path.parents for other in plan.hidden)]
    for path in outermost:
        lines.extend(_cover(path))
    for index, path in enumerate(keep):
        lines += [f"mkdir -p {quote(str(path))}", f"mount --move $stash/{index} {quote(str(path))}"]
    # A hidden path inside one brought back (the instructor package installed in the environment
    # that is kept) is covered again.
    for path in plan.hidden:
        if any(path != kept and kept in path.parents for kept in keep):
            lines.extend(_cover(path))
    writable = {str(path) for path in plan.writable}
    # What was brought back read-only stays so even under /tmp (the loop below leaves /tmp alone):
    # the student edition and the shared cache are read by the next kernels too.
    for path in keep:
        if str(path) not in writable:
            lines.append(f"mount -o remount,bind,ro {quote(str(path))}")
    # Everything but the work folder and /tmp read-only: remount each visible mount read-only.
    lines.append("for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
                 "case \"$m\" in /proc*|/dev*|/sys*|/tmp|/tmp/*) ;; "
                 + "".join(f"{quote(w)}) ;; " for w in sorted(writable))
                 + "*) mount -o remount,bind,ro \"$m\" 2>/dev/null || true ;; esac; done")
    lines.append(f"cd {quote(str(workdir))}")
    lines.append("exec setpriv --no-new-privs --inh-caps=-all --bounding-set=-all -- "
                 + " ".join(quote(part) for part in command))
    return [shutil.which("unshare") or "unshare", "--net", "--pid", "--fork", "--mount", "--ipc", "--uts",
            "--mount-proc", "--kill-child", "--", "sh", "-c", "\n".join(lines)]


def _cover(path: Path) -> list[str]:
    """Shell lines that hide ``path``: an empty tmpfs over a folder, /dev/null over a file."""
    if path.is_dir():
        return [f"mount -t tmpfs -o mode=755 course-hidden {shlex.quote(str(path))}"]
    if path.exists():
        return [f"mount --bind /dev/null {shlex.quote(str(path))}"]
    return []


# The environment a kernel gets: nothing of the grader's but what Python, PyTorch and Triton need.
_PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                   "LD_LIBRARY_PATH", "TRITON_INTERPRET", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "COURSE_SANDBOX")


def kernel_environment(*, edition: Path, workdir: Path, threads: int | None, gpu: bool,
                       cache: Path | None = None) -> dict[str, str]:
    """A scrubbed environment for a kernel that imports the student edition at ``edition`` (and reads
    the shared disk ``cache``, if given)."""
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    bin_dir = str(Path(sys.executable).parent)
    env.update({
        "PATH": os.pathsep.join([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "PYTHONPATH": str(edition),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "MPLCONFIGDIR": str(workdir / ".config" / "matplotlib"),
        "TRITON_CACHE_DIR": str(workdir / ".cache" / "triton"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })
    if cache is not None:
        env["COURSE_CACHE_DIR"] = str(cache)
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
        env.setdefault("MKL_NUM_THREADS", str(threads))
    if not gpu:
        env["TRITON_INTERPRET"] = "1"
    return env
