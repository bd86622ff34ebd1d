# rill — the two commands of the README, and the pieces they are made of.
#   make demo   build rill (only that target) and serve the project's own small model on HOST:PORT (default
#               127.0.0.1:8000; `make demo PORT=8080 HOST=0.0.0.0`), on the GPU when there is one: the trained
#               demo model models/kimi-linear-demo when it is in the tree, else a random tiny one (a note says so)
#   make test   build everything and run the whole test suite               (what .ci/run calls)
#   make test-tsan   the engine and server tests under ThreadSanitizer     (part of make test)
#   make generate-demo   one completion from the same model, without the server
#   make demo-data   the demo model's corpus, vocabulary and pre-tokenised splits in .deps/demo_corpus
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TINY_MODEL ?= models/rill-tiny
HOST ?= 127.0.0.1
PORT ?= 8000
# The demo's device: auto is the first GPU when this build has CUDA and one answers, else the CPU.
DEVICE ?= auto
# The trained demo model (issue #20; tools/demo_model/README.md); make demo falls back to TINY_MODEL without it.
DEMO_MODEL ?= models/kimi-linear-demo
# ThreadSanitizer: a second, CPU-only build of what runs threads against the engine — the engine and server
# tests and the rill binary that the server e2e tests start — run so that a race stops a test at its first
# report (halt_on_error), failing CI. The prefix-cache and speculative suites (programs of their own) are not
# run there: they repeat the engine's threading on other workloads at many times the CPU time.
TSAN_BUILD ?= build-tsan
TSAN_TARGETS ?= engine_tests server_tests server_protocol_tests rill
TSAN_TESTS ?= ^((engine_tests|server_tests|server_protocol_tests)\..*|e2e_(api|bad_requests|load|preemption|prefix_cache|shutdown))$$
TSAN_OPTIONS ?= halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp
# Tests `make test` leaves to the ThreadSanitizer run, so each runs once: the 60 s load soak (64 clients with
# cancellations: the race hunt is its point; its checks are the same in either build).
TEST_EXCLUDE ?= ^e2e_load$$

.PHONY: all setup setup-test build build-rill test test-tsan demo serve-demo generate-demo demo-model demo-data tiny-model clean format

all: build

# setup: the packages building rill needs; setup-test: those plus the test suite's (browser, MPI, node, ...).
setup:
	./scripts/setup.sh

setup-test:
	./scripts/setup.sh --test

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: setup-test $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

# Only the binary (what the demo needs): not the ~370 test and benchmark targets.
build-rill: setup $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS) rill

test: build
	./scripts/setup_node.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1800 -E '$(TEST_EXCLUDE)'
	@./scripts/skipped_tests.sh $(BUILD)
	$(MAKE) --no-print-directory test-tsan

# Line tables only (RILL_DEBUG_INFO=lines, -g1): TSan's reports keep file:line, and the build that exists only
# to run under TSan skips the full debug info's compile and link time.
$(TSAN_BUILD)/build.ninja:
	cmake -S . -B $(TSAN_BUILD) -G Ninja $(CMAKE_FLAGS) -DRILL_CUDA=OFF -DRILL_SANITIZE=thread \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRILL_DEBUG_INFO=lines

test-tsan: setup-test $(TSAN_BUILD)/build.ninja
	./scripts/setup_node.sh
	ninja -C $(TSAN_BUILD) -j $(JOBS) $(TSAN_TARGETS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="$(TSAN_OPTIONS)" \
	  ctest --output-on-failure -j $(JOBS) --timeout 1800 -R '$(TSAN_TESTS)'

tiny-model: build-rill
	$(BUILD)/rill tiny-model $(TINY_MODEL)

demo: serve-demo

# Which model the demo targets use: DEMO_MODEL when its weights are there, else the random tiny model (built).
demo-model: build-rill
	@if [ ! -f $(DEMO_MODEL)/model.safetensors ]; then \
	  echo "note: $(DEMO_MODEL) is not in this tree (the trained demo model, tools/demo_model/README.md);"; \
	  echo "      using the random tiny model $(TINY_MODEL) instead: well-formed answers, random text."; \
	  $(BUILD)/rill tiny-model $(TINY_MODEL); \
	fi

demo_dir = $(if $(wildcard $(DEMO_MODEL)/model.safetensors),$(DEMO_MODEL),$(TINY_MODEL))
demo_name = $(notdir $(demo_dir))

generate-demo: demo-model
	$(BUILD)/rill generate $(demo_dir) --prompt "The jury said that" --max-tokens 32

serve-demo: demo-model
	@echo
	@echo "Serving $(demo_dir) on http://$(HOST):$(PORT)/v1 (Ctrl-C stops it). From another terminal:"
	@echo
	@echo "  curl -s http://$(HOST):$(PORT)/v1/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"$(demo_name)\", \"prompt\": \"The jury said that\", \"max_tokens\": 32, \"temperature\": 0}'"
	@echo "  curl -s http://$(HOST):$(PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"$(demo_name)\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32, \"temperature\": 0}'"
	@echo
	$(BUILD)/rill serve $(demo_dir) --device $(DEVICE) --host $(HOST) --port $(PORT)

demo-data: setup-test build-rill
	./tools/demo_model/fetch_corpus.sh

format:
	find src tests bench -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(TSAN_BUILD)
