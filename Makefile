# The README's commands. Each target installs what it needs into .venv first.
#   make run    install, print the node probe, then run the standalone koordlet (127.0.0.1:9316)
#   make test   install test dependencies, provision every test tier, run the whole suite
#   make cluster       start a local single-node Kubernetes (real kubelet, containerd, runc)
#                      and print the KUBECONFIG to use; make cluster-image loads the project's
#                      image into it; make cluster-down stops it
#   make audit  check the pinned dependencies (requirements/) against PyPI's yanked and vulnerability flags
#   (make test also builds helm from its Go module, hack/helm.sh, and the image, hack/image.sh,
#   for the chart tests)
#   make image  build the container image (Dockerfile) with buildah; prints the archive's path
#   make bench  run the benchmark harness (JSON results in benchmarks/out/; webhook_admission builds
#               its load generator, vegeta, with hack/vegeta.sh; scheduler_e2e builds upstream's
#               kube-scheduler with hack/kube-scheduler.sh)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.koord-installed
LOCK   := requirements/constraints.txt
BUILD_LOCK := requirements/build-constraints.txt
NATIVE := $(shell find native -type f \( -name '*.pyx' -o -name '*.py' -o -name '*.c' -o -name '*.h' \) -not -name '_*.c' 2>/dev/null)

.PHONY: run test bench lint crds install audit clean cluster cluster-down cluster-image image

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --constraint $(LOCK) pip setuptools

# only the pinned versions (hack/lock.sh writes the pins; make audit checks them)
$(STAMP): $(PY) pyproject.toml setup.py $(LOCK) $(BUILD_LOCK) $(NATIVE)
	$(PIP) install --quiet --constraint $(LOCK) --build-constraint $(BUILD_LOCK) -e '.[test]'
	@touch $@

install: $(STAMP)

run: $(STAMP)
	agent_mode=hostMode $(VENV)/bin/koordlet probe
	$(VENV)/bin/koordlet --standalone

test: $(STAMP)
	@bin="$$(bash hack/envtest.sh)" || { echo "make test: hack/envtest.sh failed; the envtest tier will be skipped" >&2; bin=; }; \
	node="$$(bash hack/node-tier.sh)" || { echo "make test: hack/node-tier.sh failed; the node tier will be skipped" >&2; node=; }; \
	vegeta="$$(bash hack/vegeta.sh)" || { echo "make test: hack/vegeta.sh failed; the webhook_admission smoke run will fail" >&2; vegeta=; }; \
	helm="$$(bash hack/helm.sh)" || { echo "make test: hack/helm.sh failed; the chart tests will fail" >&2; helm=; }; \
	image="$$(bash hack/image.sh)" || { echo "make test: hack/image.sh failed; the chart install test will fail" >&2; image=; }; \
	KOORD_ENVTEST_BIN="$$bin" KOORD_NODETIER_BIN="$$node" KOORD_VEGETA="$$vegeta" KOORD_HELM_BIN="$$helm" \
	KOORD_IMAGE_ARCHIVE="$$image" $(PY) -m pytest $(PYTEST_ARGS)

# the container image of every component (Dockerfile, built without a Docker daemon)
image:
	@bash hack/image.sh

# the node tier's cluster, for users (docs/cluster.md); needs root
cluster: $(STAMP)
	@KOORD_ENVTEST_BIN="$$(bash hack/envtest.sh)" KOORD_NODETIER_BIN="$$(bash hack/node-tier.sh)" \
	$(PY) -m testsupport.nodetier up

cluster-down: $(STAMP)
	@$(PY) -m testsupport.nodetier down

# the project's image in the cluster's containerd (for helm install charts/koordinator)
cluster-image: $(STAMP)
	@$(PY) -m testsupport.nodetier load "$$(bash hack/image.sh)"

bench: $(STAMP)
	$(PY) -m benchmarks

audit: $(STAMP)
	$(PY) hack/depaudit.py

crds: $(STAMP)
	$(PY) -m koordinator.api.crdgen --output-dir crds --output-dir charts/koordinator/files/crds

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf build $(VENV) *.egg-info benchmarks/out
	find native koordlet -name '*.so' -delete
	find native -name '_*.c' -delete
