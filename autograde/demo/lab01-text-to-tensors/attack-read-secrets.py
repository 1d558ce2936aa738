"""Demo student: correct answers, plus a probe for the hidden tests and the gradebook (01_tokenization)."""

DESCRIPTION = (
    "Answers correctly, and its first answer cell walks the disk (the grading workspace, the "
    "instructor's checkout next to course_lib, /tmp, home folders) for gradebook.db, nbgrader's "
    "source notebooks and solutions/, prints what it finds into its own output, and tries to write "
    "outside its folder. The kernel runs in a sandbox that sees only the student's folder and the "
    "student edition: it finds nothing and writes nothing, so full marks and a feedback page that "
    "holds no hidden test; expected 23/23"
)
BASE = "solution"
ANSWERS = {
    "get_pair_counts": '''
def get_pair_counts(ids):
    counts = {}
    for i in range(len(ids) - 1):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


import os
import time

import course_lib

# Instructor files: the gradebook, nbgrader's config and source folder, the solutions, and any
# notebook that still holds its hidden tests (the student's own copy does not).
secret_names = {"gradebook.db", "nbgrader_config.py", "solutions", "source"}
marker = "BEGIN " + "HIDDEN TESTS"   # spelled in two parts so this cell's own source does not match
secrets, started = [], time.time()
starts = ["..", os.path.dirname(os.path.dirname(course_lib.__file__)), "/tmp", "/work", "/root", "/home", "/"]
for top in starts:
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = [d for d in subfolders if d not in ("proc", "sys", "dev", "usr", ".venv", "lib")]
        secrets += [os.path.join(folder, name) for name in files + subfolders if name in secret_names]
        for name in files:
            if name.endswith(".ipynb"):
                try:
                    if marker in open(os.path.join(folder, name), errors="replace").read():
                        secrets.append(os.path.join(folder, name))
                except OSError:
                    pass
        if time.time() - started > 5:
            break
for path in secrets[:20]:
    try:
        print("LEAKED", path, open(path, errors="replace").read()[:300])
    except OSError as error:
        print("LEAKED", path, error)
for target in ["/tmp/course-escape.txt", os.path.expanduser("~/course-escape.txt")]:
    try:
        with open(target, "w") as escape:
            escape.write("escaped")
    except OSError:
        pass
print("searched; found", len(secrets), "secrets")
''',
}
EXPECTED = {"01_tokenization": 23}
