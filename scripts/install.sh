#!/usr/bin/env bash
# Installs everything seglogfs needs on a fresh Debian machine (run as root): system packages
# (FUSE 3, getfattr, Java for Spark) and a virtualenv at ./.venv with the project and its
# test and Spark extras. Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
# grep without -q: with pipefail, -q's early exit could kill ldconfig (SIGPIPE) and fail the test
ldconfig -p | grep 'libfuse3\.so\.3' >/dev/null || need_apt+=(libfuse3-3)
command -v getfattr >/dev/null || need_apt+=(attr)
# The read-path tests drive records.jsonl through jq (tests/fs/test_fs_views.py).
command -v jq >/dev/null || need_apt+=(jq)
# The failed-disk tests format a small ext4 loop volume (tests/test_daemon_faults.py).
command -v mkfs.ext4 >/dev/null || need_apt+=(e2fsprogs)
# Spark 4 needs Java 17 or newer.
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${java_major:-0}" -ge 17 ] 2>/dev/null || need_apt+=(openjdk-17-jre-headless)
# The Kafka oracle (scripts/kafka-oracle.sh, docs/oracle.md) resolves Apache Kafka through Maven.
command -v mvn >/dev/null || need_apt+=(maven)
# The Kafka listener's tests and bench/kafka.py drive it with kcat (librdkafka's command-line client).
command -v kcat >/dev/null || need_apt+=(kcat)
# tests/kafka/test_kafka_local_users.py runs kcat as another user with setpriv (util-linux).
command -v setpriv >/dev/null || need_apt+=(util-linux)
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
# systemd/seglogfs.service runs /bin/kill (ExecReload); `systemd-analyze verify` checks that it exists.
[ -x /bin/kill ] || need_apt+=(procps)
command -v "${PYTHON:-python3}" >/dev/null || need_apt+=(python3)
# Debian's python3 lacks ensurepip (hence `python3 -m venv`) until python3-venv is installed.
"${PYTHON:-python3}" -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# The records scanner is a C extension (seglogfs/records/_scan.c): a compiler, the C library's
# headers (only recommended by gcc) and Python.h, which Debian's python3 ships in python3-dev.
command -v gcc >/dev/null || need_apt+=(gcc)
[ -f /usr/include/stdint.h ] || need_apt+=(libc6-dev)
"${PYTHON:-python3}" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
    || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing system packages: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.seglogfs-installed
# Reinstall when the project's metadata or the C extension's source changed, or the extension is
# missing (pip install -e builds it in place, next to its source).
# (A glob, not `ls | head`: under `set -e -o pipefail` a failed ls in a fresh clone would end the script.)
built=""
for so in seglogfs/records/_scan.*.so; do [ -f "$so" ] && built=$so; done
changed=""
for source in pyproject.toml setup.py seglogfs/records/_scan.c seglogfs/records/_scan_*.h; do
    if [ "$source" -nt "$stamp" ]; then changed=$source; fi
done
if [ ! -f "$stamp" ] || [ -z "$built" ] || [ -n "$changed" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    # pyspark ships only as an sdist; pip builds its wheel once and caches it.
    .venv/bin/python -m pip install -q -e '.[test,spark]'
    touch "$stamp"
fi
# Apache Kafka's broker and tools and Spark's Kafka connector for tests/oracle/ (cached once; the
# oracle is part of the suite, so an install without it fails here rather than skip those tests).
./scripts/kafka-oracle.sh
echo "seglogfs installed in $(pwd)/.venv"
