# The two commands of the README. Both set the machine up first (idempotent, fast on a second run).
.PHONY: serve test cluster lint typecheck unit bench soak clean

VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

serve:
	@scripts/bootstrap.sh serve
	@$(VENV)/bin/voicegate serve $(if $(CONFIG),--config "$(CONFIG)",)

# PostgreSQL, two nodes, Kamailio (SIP) and HAProxy (HTTP) on loopback: scripts/cluster.py, docs/scaling.md.
cluster:
	@scripts/bootstrap.sh cluster
	@$(PY) -m scripts.cluster $(if $(CONFIG),--config "$(CONFIG)",) $(CLUSTER_ARGS)

test:
	@scripts/bootstrap.sh test
	$(VENV)/bin/ruff check voicegate tests bench scripts examples
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -n 2 --dist loadgroup --durations=30 $(PYTEST_ARGS)

# Every test marked `soak` (all of tests/reliability, the load tests elsewhere) at ten times its full size.
soak:
	@scripts/bootstrap.sh test
	VOICEGATE_SOAK=10 $(VENV)/bin/pytest -n 2 --dist loadgroup -m soak $(PYTEST_ARGS)

bench:
	@scripts/bootstrap.sh test
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info
