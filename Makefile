# Thin wrapper: every target is a task of tasks.py (which needs only Python 3.11 and pip).
PYTHON ?= python3

.PHONY: demo test bench docs
demo test bench docs:
	$(PYTHON) tasks.py $@
