# One-command set-up: `make demo` and `make test` create or update .venv idempotently.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint clean

venv: $(STAMP)

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[ros-pip,test,ray]'
	touch $(STAMP)

demo: venv
	$(PY) -m alpamayo_offload.ros.demo

# Bytecode first: the tests start ~60 node, replay and CLI processes, and where
# PYTHONDONTWRITEBYTECODE is set each would compile the package again (~0.5 s of CPU each).
test: venv
	$(PY) -m compileall -q alpamayo_offload testkit bench > /dev/null
	ALPAMAYO_TEST_NEEDS_ROS=1 $(PY) -m pytest -q

lint: venv
	$(PY) -m ruff check alpamayo_offload test testkit bench launch

clean:
	rm -rf $(VENV) build install log *.egg-info
