"""Taking the next kit without losing your work: ``make update KIT=<the new kit's folder or zip>``.

Your instructor publishes a new kit after each deadline (the next labs, and the course's answers
of the labs past due). The kit you have lists every file as it was released, with a checksum
(``KIT.json``), so this tells your changes from the kit's:

- a file you never changed is replaced by the new kit's version (or removed, if the new kit has
  none), and a file new in the kit is added;
- **a notebook you changed is never overwritten**: where the new kit changed it too, its new
  version is saved as ``kit-updates/<path>`` for you to compare (``course check`` works on either);
- any other file you changed (the library, the Makefile) is replaced, and your version is saved
  as ``kit-updates/yours/<path>``.

In a git clone of the kit, ``make update`` with no KIT fetches the kit's new commit from your
clone's remote and applies it the same way (your commits and branches are left as they are: commit
the new files with your work). It runs on the Python the system has (no package of the course
needed), so it also works before ``make setup``.

    python3 course_lib/handin/update.py [NEW_KIT] [--kit DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

UPDATES = "kit-updates"


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _find_kit_root(folder: Path) -> Path | None:
    """The folder holding KIT.json: ``folder`` or, in an unpacked zip, the one folder inside it."""
    if (folder / "KIT.json").is_file():
        return folder
    inside = [path for path in folder.iterdir() if path.is_dir()]
    if len(inside) == 1 and (inside[0] / "KIT.json").is_file():
        return inside[0]
    return None


def _unpack(archive: Path, scratch: Path) -> Path:
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            parts = Path(info.filename).parts
            if info.filename.startswith("/") or ".." in parts:
                raise SystemExit(f"update: {archive} has an entry outside its folder ({info.filename}): not used")
        zipped.extractall(scratch)
    return scratch


def _fetch_with_git(kit: Path, scratch: Path) -> Path:
    """The files of the kit's new commit on the clone's remote (``git fetch``), written to ``scratch``."""
    def git(*args: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(kit), *args], capture_output=True, **kwargs)

    fetched = git("fetch", "--quiet", text=True)
    if fetched.returncode != 0:
        raise SystemExit(f"update: `git fetch` failed: {fetched.stderr.strip()}\n"
                         "give the new kit instead: make update KIT=path/to/kit.zip")
    archive = git("archive", "--format=tar", "FETCH_HEAD")
    if archive.returncode != 0:
        raise SystemExit(f"update: the fetched kit could not be read: {archive.stderr.decode(errors='replace')}")
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if member.name.startswith("/") or ".." in Path(member.name).parts or not (member.isfile() or member.isdir()):
                raise SystemExit(f"update: the fetched kit has an entry it should not ({member.name}): not used")
        tar.extractall(scratch)
    return scratch


def plan_update(kit: Path, new: Path) -> list[tuple[str, str]]:
    """[(action, path)] to take ``new`` into ``kit``: "add", "replace", "remove", "keep" (a notebook you
    changed; the kit's new version saved aside), "backup" (a file you changed, replaced: yours saved)."""
    old_files = json.loads((kit / "KIT.json").read_text(encoding="utf-8")).get("files", {})
    new_files = json.loads((new / "KIT.json").read_text(encoding="utf-8")).get("files", {})
    actions = []
    for name in sorted(set(old_files) | set(new_files)):
        here = kit / name
        mine = file_digest(here) if here.is_file() else None
        changed_by_you = mine is not None and mine != old_files.get(name)
        if name not in new_files:
            if mine is not None and not changed_by_you:
                actions.append(("remove", name))
            continue
        if mine == new_files[name]:
            continue
        if mine is None:
            actions.append(("add", name))
        elif not changed_by_you:
            actions.append(("replace", name))
        elif name.endswith(".ipynb"):
            if new_files[name] != old_files.get(name):
                actions.append(("keep", name))
        else:
            actions.append(("backup", name))
    return actions


def apply_update(kit: Path, new: Path, actions: list[tuple[str, str]]) -> None:
    for action, name in actions:
        target = kit / name
        if action == "remove":
            target.unlink()
            continue
        if action == "keep":
            aside = kit / UPDATES / name
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(new / name, aside)
            continue
        if action == "backup":
            aside = kit / UPDATES / "yours" / name
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, aside)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(new / name, target)
    shutil.copyfile(new / "KIT.json", kit / "KIT.json")


_SAID = {"add": "added", "replace": "updated", "remove": "removed (the new kit has no such file)",
         "keep": f"kept YOUR version (you changed it); the new kit's version is in {UPDATES}/",
         "backup": f"updated; your changed version is saved in {UPDATES}/yours/"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("new", nargs="?", type=Path, help="the new kit: its folder or its zip (default: git fetch)")
    parser.add_argument("--kit", type=Path, default=Path.cwd(), help="your kit (default: this folder)")
    parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    args = parser.parse_args(argv)
    kit = args.kit.resolve()
    if not (kit / "KIT.json").is_file():
        print(f"update: {kit} is not a kit (no KIT.json): run this in your kit's folder", file=sys.stderr)
        return 2
    if "files" not in json.loads((kit / "KIT.json").read_text(encoding="utf-8")):
        print("update: your kit is older than `make update`: copy the new kit's labs you do not have by hand",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kit-update-") as scratch:
        if args.new is None:
            if not (kit / ".git").exists():
                print("update: give the new kit: make update KIT=path/to/kit.zip (or its folder)", file=sys.stderr)
                return 2
            new = _find_kit_root(_fetch_with_git(kit, Path(scratch)))
        elif args.new.is_dir():
            new = _find_kit_root(args.new.resolve())
        elif args.new.suffix.lower() == ".zip" and args.new.is_file():
            new = _find_kit_root(_unpack(args.new, Path(scratch)))
        else:
            print(f"update: {args.new} is neither a kit's folder nor a zip", file=sys.stderr)
            return 2
        if new is None or new == kit:
            print(f"update: {args.new or 'the fetched commit'} holds no other kit (no KIT.json)", file=sys.stderr)
            return 2
        actions = plan_update(kit, new)
        for action, name in actions:
            print(f"  {name}: {_SAID[action]}")
        if not actions:
            print("update: your kit is already the new one")
        if not args.dry_run:
            apply_update(kit, new, actions)
            labs = json.loads((new / "KIT.json").read_text(encoding="utf-8")).get("labs", [])
            print(f"update: done; this kit now holds {', '.join(labs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
