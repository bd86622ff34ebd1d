# rill — the two commands of the README, and the pieces they are made of.
#   make demo   build rill and the project's own small model, serve it on 127.0.0.1:8000 (the main job)
#   make test   build everything and run the whole test suite               (what .ci/run calls)
#   make generate-demo   one completion from the small model, without the server
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
TINY_MODEL ?= models/rill-tiny

.PHONY: all setup build test demo serve-demo generate-demo tiny-model clean format

all: build

setup:
	./scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

test: build
	./scripts/setup_node.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1800
	@./scripts/skipped_tests.sh $(BUILD)

tiny-model: build
	$(BUILD)/rill tiny-model $(TINY_MODEL)

demo: serve-demo

generate-demo: tiny-model
	$(BUILD)/rill generate $(TINY_MODEL) --prompt "The license grants" --max-tokens 24 --temperature 0.8 --seed 7

serve-demo: tiny-model
	@echo
	@echo "Serving $(TINY_MODEL) on http://127.0.0.1:8000/v1 (Ctrl-C stops it). From another terminal:"
	@echo
	@echo "  curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"model\": \"rill-tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'"
	@echo
	$(BUILD)/rill serve $(TINY_MODEL) --device cpu --host 127.0.0.1 --port 8000

format:
	find src tests bench -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
