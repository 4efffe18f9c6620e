# libdsv4 — the two set-up commands of the README, plus a few conveniences.
#   make run        install missing Debian packages, build, run `dsv4 run` on the CPU backend
#   make test       install, build, run every test
#   make test-asan  the suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      build and run the CPU benchmarks
#   make bench-cpu  the CPU benchmark in one run against its roofline and plain PyTorch
#                   (bench/results/cpu*.json, docs/img/cpu-roofline.png)
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The project's own builds treat warnings as errors; a consumer's build (DSV4_WERROR default OFF) does not.
WERROR_FLAGS = -DDSV4_WERROR=ON
CTEST_FLAGS ?= --output-on-failure

.PHONY: all deps configure build run test test-asan bench bench-cpu clean format format-check

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
	cd $(BUILD) && ctest $(CTEST_FLAGS) -j $(JOBS)

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDSV4_SANITIZE=address,undefined \
	  -DDSV4_BACKEND_CUDA=OFF -DDSV4_BUILD_BENCH=OFF $(WERROR_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest $(CTEST_FLAGS) -j $(JOBS) -LE no-asan

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
	rm -rf $(BUILD) $(ASAN_BUILD)
