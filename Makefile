PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
OUT    ?= promokit-demo

.PHONY: install demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/promokit campaign demo --out $(OUT)

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
