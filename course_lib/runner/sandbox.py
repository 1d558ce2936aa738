"""Where a student's kernel runs: a sandbox that hides the instructor's files and the network.

The grader starts each student kernel through the strongest isolation the machine offers:

- ``bubblewrap`` (``bwrap``, Debian package ``bubblewrap``): a read-only view of the file system in
  which the instructor's files are replaced by empty folders, a private ``/tmp`` of a fixed size
  (the ``disk`` limit: the kernel's working folder lives in it, filled from a read-only copy of the
  submission), no network (a new network namespace has only a loopback device), its own process
  tree, and every capability dropped, so the kernel cannot unmount what hides the instructor's
  files. Run as root, the kernel also gets a user id of its own (``kernel_uid``), so the process
  limit (RLIMIT_NPROC, which root ignores) holds and the kernel can signal no other process;
- ``unshare`` (util-linux) as root, when bubblewrap is missing: the same namespaces and mounts,
  made by a small shell script, and the user id changed and capabilities dropped with ``setpriv``
  before Python starts;
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

__all__ = ["Isolation", "SandboxPlan", "default_plan", "detect_isolation", "fill_shared_cache", "kernel_environment",
           "kernel_python", "kernel_uid", "readable_to_all", "shared_cache", "shm_bytes", "wrap_command"]

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
    edition, the relay sockets' folder); writable: folders of the host the kernel may write
    (none in a sandbox: it writes only in its scratch tmpfs). ``seed``: the host folder holding the
    submission's files, shown read-only at ``seed_inside``. ``scratch_bytes``: the size of the
    tmpfs that holds ``/tmp`` and the working folder (None: the system's default). ``uid``: the user
    id the kernel runs as (None: the grader's).
    """

    hidden: list[Path] = field(default_factory=list)
    visible_inside: list[Path] = field(default_factory=list)
    readable: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)
    seed: Path | None = None
    seed_inside: Path | None = None
    scratch_bytes: int | None = None
    uid: int | None = None


# Where a sandboxed kernel finds the submission's files (read-only) and makes its working folder.
SEED_INSIDE = Path("/tmp/.course-submission")
WORK_INSIDE = Path("/tmp/work")
SHM_MAX_BYTES = 256 << 20
# User ids of graded kernels: one per (grader process, kernel), far above any real account.
KERNEL_UID_BASE = 1 << 30


def kernel_uid(counter: int) -> int:
    """A user id no other process uses: from this grader process's id and its kernel ``counter``.

    RLIMIT_NPROC counts the processes of a user id, so each kernel needs one of its own (two
    kernels sharing one would share their process limit).
    """
    return KERNEL_UID_BASE + os.getpid() * 64 + counter % 64


def shm_bytes(scratch_bytes: int) -> int:
    """The size of a kernel's /dev/shm (shared memory between its processes): its disk limit, at most 256 MB."""
    return min(scratch_bytes, SHM_MAX_BYTES)


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


def kernel_python() -> str:
    """The Python to start a kernel with, by a path the sandbox keeps: the environment's own ``bin``
    under its resolved prefix (``sys.executable`` may reach it through a link in a hidden folder,
    such as a checkout's ``.venv`` linked to another's)."""
    candidate = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
    return str(candidate) if candidate.exists() else sys.executable


def shared_cache() -> Path | None:
    """The grader's disk cache (``course_lib.disk_cache``), made if missing; None if it cannot be.

    Kernels read the corpus and the dequantized model from it, as the grader does, instead of
    spending seconds making their own copies; the sandbox shows it to them read-only, so no
    submission can change what the grader (or the next kernel) reads there. Without a sandbox a
    kernel runs as the grader's user and could write it, as it could the installed library.
    Its entries hold public artifacts only, so they are made readable to every user: a kernel
    runs under a user id of its own.
    """
    from course_lib.disk_cache import cache_folder

    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not folder.is_dir():
        return None
    readable_to_all(folder)
    return folder.resolve()


@lru_cache(maxsize=1)
def fill_shared_cache() -> bool:
    """Fill the shared cache with the public artifacts kernels read (SmolLM2's header and weights
    dequantized, the ``stdlib-docstrings`` corpus), once per process; False if there is no cache.

    Graded kernels cannot write the cache, so on a new machine each one would build its own copy
    (about 10 s of CPU and half a gigabyte per kernel that loads the model). Grading workers call
    this before their first kernel: the first one builds the entries while a lock holds the others,
    which then find them made. A missing model file, or a file that cannot be read, is left for the
    notebook that needs it to report.
    """
    import fcntl

    from course_lib.corpus import load_corpus
    from course_lib.gguf_file import fill_disk_cache

    folder = shared_cache()
    try:
        lock = open(folder / ".filling.lock", "a") if folder is not None else None
    except OSError:
        lock = None
    if lock is None:
        return False
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        for fill in (fill_disk_cache, lambda: load_corpus("stdlib-docstrings")):
            try:
                fill()
            except OSError:   # ModelFileMissing among them: only a speed-up, kernels build what is missing
                pass
    readable_to_all(folder)
    return True


def readable_to_all(folder: Path) -> None:
    """Add read (and, for folders, search) permission for everyone to what this user owns under ``folder``."""
    uid = os.geteuid()
    for path in [folder, *folder.rglob("*")]:
        try:
            info = path.lstat()
            if info.st_uid != uid or path.is_symlink():
                continue
            wanted = info.st_mode | (0o555 if path.is_dir() else 0o444)
            if wanted != info.st_mode:
                os.chmod(path, wanted & 0o7777)
        except OSError:
            continue


def default_plan(*, workdir: Path, edition: Path, extra_hidden: list[Path], cache: Path | None = None,
                 net: Path | None = None, scratch_bytes: int | None = None, uid: int | None = None) -> SandboxPlan:
    """The plan for one kernel: hide the instructor's side, keep Python, the edition (and the shared
    ``cache``, the relay folder ``net``) read-only, and the submission's folder ``workdir`` as the
    read-only seed of the kernel's working folder (see ``SandboxPlan``)."""
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
    readable = [edition.resolve()] + ([cache.resolve()] if cache is not None else []) \
        + ([net.resolve()] if net is not None else [])
    return SandboxPlan(hidden=unique, visible_inside=_python_prefixes(), readable=readable, writable=[],
                       seed=workdir.resolve(), seed_inside=SEED_INSIDE, scratch_bytes=scratch_bytes, uid=uid)


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


HIDDEN_TMPFS_BYTES = 1 << 20   # a folder that hides the instructor's files holds nothing but mount points


def _setpriv(command: list[str], uid: int | None) -> list[str]:
    """``command`` run with every capability dropped (and as ``uid``, when given), no new privileges."""
    switch = ["--reuid", str(uid), "--regid", str(uid), "--clear-groups"] if uid is not None else []
    return [shutil.which("setpriv") or "setpriv", *switch, "--no-new-privs", "--inh-caps=-all",
            "--bounding-set=-all", "--", *command]


def _bubblewrap(command: list[str], plan: SandboxPlan, workdir: Path) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--unshare-net",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL"]
    if plan.uid is not None:  # kept only for setpriv, which changes the user id and drops them all
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    scratch = ["--size", str(plan.scratch_bytes)] if plan.scratch_bytes else []
    shm = ["--size", str(shm_bytes(plan.scratch_bytes))] if plan.scratch_bytes else []
    args += ["--perms", "1777", *scratch, "--tmpfs", "/tmp", "--perms", "1777", *shm, "--tmpfs", "/dev/shm"]
    for device in _gpu_devices():
        args += ["--dev-bind", str(device), str(device)]
    hidden = [path for path in plan.hidden if path.exists()]
    for path in hidden:
        args += (["--size", str(HIDDEN_TMPFS_BYTES), "--tmpfs", str(path)] if path.is_dir()
                 else ["--ro-bind", "/dev/null", str(path)])
    # Python may live inside a hidden folder (a virtual environment in the course repository):
    # bring it back, read-only, then hide the instructor package again if it was installed there.
    for path in plan.visible_inside:
        if _covered(path, hidden) or _covered(path, [Path("/tmp")]):
            args += ["--ro-bind", str(path), str(path)]
    for path in hidden:
        if any(_covered(path, [inside]) for inside in plan.visible_inside) and path.is_dir():
            args += ["--size", str(HIDDEN_TMPFS_BYTES), "--tmpfs", str(path)]
    for path in plan.readable:
        args += ["--ro-bind", str(path), str(path)]
    if plan.seed is not None:
        args += ["--ro-bind", str(plan.seed), str(plan.seed_inside or SEED_INSIDE)]
    for path in plan.writable:
        args += ["--bind", str(path), str(path)]
    # bubblewrap makes the folders above a mount point with the modes of the host's (/root is 0700):
    # open them for the kernel's user id, which must reach the Python, the edition and the cache.
    targets = [*plan.visible_inside, *plan.readable, *plan.writable,
               *([plan.seed_inside or SEED_INSIDE] if plan.seed is not None else [])]
    covers = [*hidden, Path("/tmp")]
    opened: list[Path] = []
    for target in targets:
        for parent in reversed(target.parents):
            if any(cover in parent.parents for cover in covers) and parent not in opened \
                    and not _covered(parent, targets):   # inside a bind mount: the host's folder, read-only
                opened.append(parent)
                args += ["--chmod", "0755", str(parent)]
    inner = _setpriv(command, plan.uid) if plan.uid is not None else command
    return args + ["--chdir", "/tmp", "--", *inner]


def _unshare(command: list[str], plan: SandboxPlan, workdir: Path) -> list[str]:
    """The same view with ``unshare`` and ``mount`` in a shell script (needs root)."""
    quote = shlex.quote
    lines = ["set -e", "mount --make-rprivate /", "stash=$(mktemp -d /dev/shm/course-stash.XXXXXX)"]
    keep = [path for path in [*plan.visible_inside, *plan.readable, *plan.writable]
            if _covered(path, plan.hidden) or _covered(path, [Path("/tmp")])]
    # Park what must stay visible (and the submission's folder), cover the hidden folders and /tmp,
    # then put the parked paths back.
    moves = [(path, path) for path in keep]
    if plan.seed is not None:
        moves.append((plan.seed, plan.seed_inside or SEED_INSIDE))
    for index, (source, _) in enumerate(moves):
        lines += [f"mkdir -p $stash/{index}", f"mount --bind {quote(str(source))} $stash/{index}"]
    # Cover the outermost hidden folders (a folder inside one already covered no longer exists).
    outermost = [path for path in plan.hidden
                 if not any(other != path and other in path.parents for other in plan.hidden)]
    for path in outermost:
        lines.extend(_cover(path))
    size = f",size={plan.scratch_bytes}" if plan.scratch_bytes else ""
    lines.append(f"mount -t tmpfs -o mode=1777{size} course-scratch /tmp")
    for index, (_, target) in enumerate(moves):
        lines += [f"mkdir -p {quote(str(target))}", f"mount --move $stash/{index} {quote(str(target))}",
                  f"rmdir $stash/{index}"]
    lines.append("rmdir $stash")
    shm = f",size={shm_bytes(plan.scratch_bytes)}" if plan.scratch_bytes else ""
    lines.append(f"mount -t tmpfs -o mode=1777{shm} course-shm /dev/shm")
    # A hidden path inside one brought back (the instructor package installed in the environment
    # that is kept) is covered again.
    for path in plan.hidden:
        if any(path != kept and kept in path.parents for kept in keep):
            lines.extend(_cover(path))
    writable = {str(path) for path in plan.writable}
    # What was brought back read-only stays so even under /tmp (the loop below leaves /tmp alone):
    # the student edition and the shared cache are read by the next kernels too.
    for _, target in moves:
        if str(target) not in writable:
            lines.append(f"mount -o remount,bind,ro {quote(str(target))}")
    # Everything but /tmp and /dev/shm read-only: remount each visible mount read-only.
    lines.append("for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
                 "case \"$m\" in /proc*|/dev*|/sys*|/tmp|/tmp/*) ;; "
                 + "".join(f"{quote(w)}) ;; " for w in sorted(writable))
                 + "*) mount -o remount,bind,ro \"$m\" 2>/dev/null || true ;; esac; done")
    lines.append("cd /tmp")
    lines.append("exec " + " ".join(quote(part) for part in _setpriv(command, plan.uid)))
    return [shutil.which("unshare") or "unshare", "--net", "--pid", "--fork", "--mount", "--ipc", "--uts",
            "--mount-proc", "--kill-child", "--", "sh", "-c", "\n".join(lines)]


def _cover(path: Path) -> list[str]:
    """Shell lines that hide ``path``: an empty tmpfs over a folder, /dev/null over a file."""
    if path.is_dir():
        return [f"mount -t tmpfs -o mode=755,size={HIDDEN_TMPFS_BYTES} course-hidden {shlex.quote(str(path))}"]
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
