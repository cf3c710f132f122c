#!/usr/bin/env bash
# The test command: installs what is missing (idempotent), lints (ruff, then the import contracts),
# type-checks (mypy), then runs pytest.
# Arguments go to pytest, e.g. `./scripts/test.sh tests/test_config.py -q`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
.venv/bin/ruff check .
.venv/bin/mypy  # strict on the engine; config in pyproject.toml
.venv/bin/lint-imports  # the layers and no import cycles: contracts in pyproject.toml
# Two worker processes, each test module whole on one (its fixtures: one mount, one daemon, one broker);
# most tests wait on mounts, daemons and JVMs, so two processes halve the suite on two cores.
exec .venv/bin/pytest -n 2 --dist loadfile "$@"
