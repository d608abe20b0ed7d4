# The two commands of README: `make demo` and `make test`. Both install what they need.
# The cargo target dir lives outside the clone so fresh clones reuse the build.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/corrflow/target
CARGO ?= cargo

.PHONY: demo test deps data pyenv build bench

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
	# The curated cell-type maps against the ontology release and the datasets' label counts.
	$${CORRFLOW_FETCH_VENV:-$$HOME/.cache/corrflow/fetch-venv}/bin/python datasets/check_cell_type_maps.py
	CORRFLOW_PYTHON=$$(scripts/python-env.sh) $(CARGO) test --release --workspace --features corrflow/failpoints --lib --bins --tests
	# The Python package (python/): built into the test venv, tested against the CLI just built.
	$$(scripts/python-package.sh) -m pytest -q python/tests
	# The CubeCL kernels of the fused operations, gradient-checked on burn's wgpu backend over
	# Mesa's software Vulkan driver (lavapipe; scripts/bootstrap.sh installs it).
	XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} $(CARGO) test --release -p corrflow-model --features wgpu --lib cubecl
	# ... and the whole trainer on them (`train --device wgpu`) against the CPU trainer's losses.
	XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} $(CARGO) test --release --features wgpu --test wgpu_train
	# The CUDA backend must keep building (CI has no GPU: build only; libcuda loads at run time).
	$(CARGO) build --release --features cuda --bins

bench: build data
	benches/ingest.sh
