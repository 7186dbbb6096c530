# Two commands on a fresh machine: `make demo` and `make test`. Each does its own set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test venv prometheus bench-ingest clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip

# Re-install only when the project's metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Debian's prometheus package brings both `prometheus` and `promtool`.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }

demo: venv
	$(BIN)/foresight demo

test: venv prometheus
	$(BIN)/python -m pytest -q

bench-ingest: venv prometheus
	$(BIN)/python bench/ingest_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
