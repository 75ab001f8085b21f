PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
LOWEST := .venv-lowest
OUT    ?= promokit-runs/campaign-demo

.PHONY: install demo test test-fast test-lowest dist clean

# Everything (all extras and the test tools) at the exact versions of constraints/lock.txt.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml constraints/lock.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c constraints/lock.txt -e '.[all,test,docs]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/promokit campaign demo --out $(OUT)

# Two workers (the machine's two cores); the tests that share the Ray cluster run on one of them.
PYTEST := -m pytest -n 2 --dist loadgroup

test: install
	$(BIN)/python $(PYTEST)

# Without the slow, Ray and service tests: a few minutes.
test-fast: install
	$(BIN)/python $(PYTEST) -m "not slow and not ray and not serve"

# The core alone (no extras) at the lowest versions pyproject.toml supports (constraints/lowest.txt): the tests
# that need an extra skip, and so do the slow end-to-end runs (make test runs them at the locked versions).
$(LOWEST)/.installed: pyproject.toml constraints/lowest.txt
	$(PYTHON) -m venv $(LOWEST) || python3 -m venv $(LOWEST)
	$(LOWEST)/bin/pip install --quiet --upgrade pip
	$(LOWEST)/bin/pip install --quiet -c constraints/lowest.txt -e '.[test]'
	touch $@

# Then a notebook's stack: the lowest NumPy and pandas beside the newest PyArrow the resolver picks for them (the
# bound in pyproject.toml keeps out the releases that refuse NumPy 1.x), reading and writing Parquet through promokit;
# then the lowest PyArrow again.
test-lowest: $(LOWEST)/.installed
	$(LOWEST)/bin/python $(PYTEST) -m "not slow"
	grep -E '^(numpy|pandas)==' constraints/lowest.txt > $(LOWEST)/numpy-pandas.txt
	$(LOWEST)/bin/pip install --quiet -c $(LOWEST)/numpy-pandas.txt --upgrade --upgrade-strategy only-if-needed -e . pyarrow
	$(LOWEST)/bin/python -c "import numpy, pandas, pyarrow; print('numpy', numpy.__version__, 'pandas', pandas.__version__, 'pyarrow', pyarrow.__version__)"
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider tests/data/test_data.py tests/data/test_data_parts.py
	$(LOWEST)/bin/pip install --quiet -c constraints/lowest.txt pyarrow

# The wheel and sdist in dist/, checked by twine.
dist: install
	$(BIN)/pip install --quiet -c constraints/lock.txt -e '.[release]'
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

clean:
	rm -rf $(VENV) $(LOWEST) $(OUT) dist .pytest_cache
