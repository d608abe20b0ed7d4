# The two commands of README: `make demo` and `make test`. Both install what they need.
# The cargo target dir lives outside the clone so fresh clones reuse the build.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/corrflow/target
CARGO ?= cargo
# Freshness by content, not file times, so a fresh clone reuses the build (scripts/build-env.sh).
export RUSTC_BOOTSTRAP = 1
export CARGO_UNSTABLE_CHECKSUM_FRESHNESS = true
TEST_FEATURES ?= corrflow/failpoints corrflow/wgpu corrflow/cuda

.PHONY: demo test deps data pyenv build bench wheel

deps:
	@scripts/bootstrap.sh
	@scripts/prune-target.sh "$(CARGO_TARGET_DIR)"
	@scripts/fetch-onnxruntime.sh >/dev/null

build: deps
	$(CARGO) build --release --bins

demo: build
	$(CARGO_TARGET_DIR)/release/corrflow demo

data:
	@datasets/fetch.sh

pyenv:
	@scripts/python-env.sh >/dev/null

test: deps data pyenv
	# No module of any crate (crates/*, src/, and the PyO3 crate in python/src) may depend on
	# itself through others (exit 1 on a cycle).
	python3 scripts/module-graph.py >/dev/null || python3 scripts/module-graph.py
	# The curated cell-type maps against the ontology release and the datasets' label counts.
	$${CORRFLOW_FETCH_VENV:-$$HOME/.cache/corrflow/fetch-venv}/bin/python datasets/check_cell_type_maps.py
	# One build with every feature, so that the dependency tree compiles once (each other feature
	# set recompiles burn and everything above it: ~25 min on a cold 2-core machine). It includes
	# - the fail points of the crash-resume tests;
	# - the CubeCL kernels of the fused operations, gradient-checked (model's `cubecl_*` tests)
	#   and trained on (`tests/wgpu_train.rs`) on burn's wgpu backend over Mesa's software
	#   Vulkan driver (lavapipe; scripts/bootstrap.sh installs it);
	# - the CUDA backend, which must keep building (CI has no GPU: libcuda loads at run time).
	CORRFLOW_PYTHON=$$(scripts/python-env.sh) XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} \
		$(CARGO) test --release --workspace --features "$(TEST_FEATURES)" --lib --bins --tests
	# The Python package (python/): built into the test venv, tested against the CLI just built.
	$$(scripts/python-package.sh) -m pytest -q --durations=15 python/tests

# The wheel one would upload: dist/corrflow-*-cp39-abi3-manylinux_2_34_x86_64.whl (HDF5 bundled).
wheel: deps pyenv
	@scripts/wheel.sh dist

bench: build data
	benches/ingest.sh
