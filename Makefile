# EventTensor developer entry points. `make setup` then `make test`.
#
#   make setup   create .venv, install the pinned toolchain, build everything
#                and install the event_tensor package (editable) into .venv
#   make build   incremental rebuild + reinstall (what setup does after the first time)
#   make test    lit (IR + Python lit tests) and pytest, one summary line
#   make docs    copy the generated dialect reference into docs/generated and
#                regenerate the Python API reference
#   make clean   remove the build tree (keeps .venv)

PYTHON ?= python3
VENV   := $(CURDIR)/.venv
VPY    := $(VENV)/bin/python
PIP    := $(VPY) -m pip --disable-pip-version-check
BUILD  := $(CURDIR)/build
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)

export CMAKE_BUILD_PARALLEL_LEVEL := $(JOBS)
export CCACHE_DIR ?= $(HOME)/.cache/ccache

.PHONY: setup venv deps build test lit pytest docs clean distclean

setup: deps build

venv: $(VPY)

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade "pip>=24"

# Re-installs only when requirements.txt changes.
deps: $(VENV)/.deps-stamp

$(VENV)/.deps-stamp: requirements.txt | $(VPY)
	$(PIP) install --quiet -r requirements.txt
	touch $@

# scikit-build-core drives CMake (ninja) in ./build, persistent between runs,
# so a re-run is an incremental build.
build: deps
	$(PIP) install --quiet --no-build-isolation --no-deps -e . \
	  -Ccmake.define.Python3_EXECUTABLE=$(VPY) \
	  -Ccmake.define.LLVM_EXTERNAL_LIT=$(VENV)/bin/lit
	@test -x $(VENV)/bin/et-opt && test -x $(VENV)/bin/event-tensor
	@echo "setup: built ./build; installed et-opt, event-tensor and event_tensor into .venv"

test: | $(VPY)
	@test -f $(BUILD)/build.ninja || { echo "error: no build tree; run 'make setup' first" >&2; exit 2; }
	$(VPY) utils/run_tests.py --build-dir $(BUILD) --venv $(VENV)

docs:
	cmake --build $(BUILD) --target et-docs
	$(VPY) utils/python_api_docs.py

clean:
	rm -rf $(BUILD)

distclean: clean
	rm -rf $(VENV)
