# libdsv4 — the two set-up commands of the README, plus a few conveniences.
#   make run        install missing Debian packages, build, run `dsv4 run` on the CPU backend
#   make test       install, build, run every test, then a short smoke of every fuzzer
#   make test-asan  the suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-tsan  the concurrency tests under ThreadSanitizer
#   make fuzz       every libFuzzer target for FUZZ_SECONDS each (clang, ASan + UBSan)
#   make reliability-report   docs/reliability.md's figures from the runs recorded above
#   make bench      build and run the CPU benchmarks
#   make bench-cpu  the CPU benchmark in one run against its roofline and plain PyTorch
#                   (bench/results/cpu*.json, docs/img/cpu-roofline.png)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The project's own builds treat warnings as errors; a consumer's build (DSV4_WERROR default OFF) does not.
WERROR_FLAGS = -DDSV4_WERROR=ON
CTEST_FLAGS ?= --output-on-failure
# Labels test-asan leaves out (a regular expression); .ci/run also leaves out the slowest suites.
ASAN_EXCLUDE ?= no-asan
FUZZ_SECONDS ?= 600
FUZZ_FLAGS ?=
CLANG ?= clang-14

.PHONY: all deps configure build run test test-asan test-tsan fuzz-build fuzz-smoke fuzz bench \
	bench-cpu clean format format-check reliability-report

all: build

deps:
	@./.ci/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(WERROR_FLAGS) $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/dsv4 info
	$(BUILD)/bin/dsv4 run --backend cpu

test: build
	cd $(BUILD) && ctest $(CTEST_FLAGS) -j $(JOBS) --output-junit ctest-junit.xml
	$(MAKE) fuzz-smoke

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDSV4_SANITIZE=address,undefined \
	  -DDSV4_BACKEND_CUDA=OFF -DDSV4_BACKEND_HIP=OFF -DDSV4_BUILD_BENCH=OFF $(WERROR_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS) -j $(JOBS) -LE '$(ASAN_EXCLUDE)' \
	  --output-junit ctest-junit.xml

# ThreadSanitizer: only what the concurrency tests need is built (label tsan).
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_SANITIZE=thread \
	  -DDSV4_BACKEND_CUDA=OFF -DDSV4_BACKEND_HIP=OFF -DDSV4_BUILD_BENCH=OFF -DDSV4_BUILD_EXAMPLES=OFF $(WERROR_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target dsv4_concurrency_test
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest $(CTEST_FLAGS) -j $(JOBS) -L tsan --output-junit ctest-junit.xml

# libFuzzer (clang): the library and the CPU module with coverage, ASan and UBSan; fuzz/ targets.
$(FUZZ_BUILD)/build.ninja: | deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_C_COMPILER=$(CLANG) -DCMAKE_CXX_COMPILER=$(CLANG:clang%=clang++%) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_FUZZ=ON -DDSV4_SANITIZE=address,undefined \
	  -DDSV4_BACKEND_CUDA=OFF -DDSV4_BACKEND_HIP=OFF -DDSV4_BUILD_TESTS=OFF -DDSV4_BUILD_BENCH=OFF -DDSV4_BUILD_EXAMPLES=OFF $(WERROR_FLAGS)

fuzz-build: $(FUZZ_BUILD)/build.ninja
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# Each fuzzer for DSV4_FUZZ_SMOKE_SECONDS (10) over its committed corpus and found inputs.
fuzz-smoke: fuzz-build
	cd $(FUZZ_BUILD) && ctest $(CTEST_FLAGS) -L fuzz --output-junit ctest-junit.xml

fuzz: fuzz-build
	python3 scripts/fuzz.py --build $(FUZZ_BUILD) --seconds $(FUZZ_SECONDS) \
	  --record $(FUZZ_BUILD)/fuzz-runs.jsonl $(FUZZ_FLAGS)

# Folds the runs recorded in the build directories (and gpu-out/sanitize) into
# docs/reliability/runs.jsonl and regenerates the figures of docs/reliability.md.
reliability-report:
	python3 scripts/reliability_report.py $(foreach d,$(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) \
	  $(FUZZ_BUILD) gpu-out/sanitize,$(if $(wildcard $(d)),--from $(d)))

bench: build
	$(BUILD)/bin/dsv4_bench_cpu

bench-cpu: build
	@./.ci/install-deps.sh bench
	bench/cpu/bench_all.sh $(BUILD)

format:
	python3 scripts/format.py
	cmake-format -i $$(git ls-files 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake')

format-check:
	python3 scripts/format.py --check
	cmake-format --check $$(git ls-files 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
