#!/usr/bin/env bash
# Fills the Kafka oracle's cache once: Apache Kafka's broker and tools (and Spark's own Kafka
# connector) resolved by Maven into the local Maven repository, with one classpath file per use,
# so the oracle tests (tests/oracle/, docs/oracle.md) start a real broker without the network.
#
#   .cache/kafka/<version>/classpath          broker, storage tool, DumpLogSegments
#   .cache/kafka/<version>/spark-classpath    org.apache.spark:spark-sql-kafka-0-10_2.13 for pyspark
#
# SEGLOGFS_KAFKA_CACHE moves the cache; KAFKA_VERSION picks another 4.x release. Safe to run again:
# an existing classpath file whose jars are all present is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
cache=${SEGLOGFS_KAFKA_CACHE:-$(pwd)/.cache/kafka}/$KAFKA_VERSION
mkdir -p "$cache"

command -v mvn >/dev/null || { echo "kafka-oracle: mvn not found (apt-get install maven)" >&2; exit 1; }

complete() {  # a classpath file exists and every jar it names is on disk
    [ -s "$1" ] || return 1
    local jar
    for jar in $(tr ':' ' ' < "$1"); do [ -f "$jar" ] || return 1; done
}

# resolve NAME GROUP:ARTIFACT:VERSION...: writes $cache/NAME from a generated pom
resolve() {
    local name=$1; shift
    complete "$cache/$name" && return 0
    local work; work=$(mktemp -d)
    {
        echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        echo "<groupId>seglogfs</groupId><artifactId>oracle-$name</artifactId><version>0</version>"
        echo '<packaging>pom</packaging><dependencies>'
        local gav g a v
        for gav in "$@"; do
            IFS=: read -r g a v <<<"$gav"
            echo "<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
        done
        echo '</dependencies></project>'
    } > "$work/pom.xml"
    mvn -q -B -f "$work/pom.xml" dependency:build-classpath -Dmdep.outputFile="$work/cp" >"$work/mvn.log" 2>&1 \
        || { tail -30 "$work/mvn.log" >&2; rm -rf "$work"; return 1; }
    mv "$work/cp" "$cache/$name"
    rm -rf "$work"
    echo "kafka-oracle: $cache/$name"
}

resolve classpath \
    "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" \
    "org.apache.kafka:kafka-tools:$KAFKA_VERSION" \
    "org.apache.kafka:kafka-storage:$KAFKA_VERSION" \
    "org.apache.kafka:kafka-server:$KAFKA_VERSION" \
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"

# Spark's own Kafka source at the installed pyspark's version; when Maven Central does not serve
# that one, SPARK_KAFKA_FALLBACK (the newest 4.x it serves). Only the connector and what Spark
# itself lacks go in spark-classpath (Spark ships Hadoop, Scala, slf4j and the codecs).
spark_version=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)
SPARK_KAFKA_FALLBACK=${SPARK_KAFKA_FALLBACK:-4.2.0}
if [ -n "$spark_version" ] && ! complete "$cache/spark-classpath"; then
    for v in "$spark_version" "$SPARK_KAFKA_FALLBACK"; do
        [ "$(cat "$cache/spark-missing" 2>/dev/null)" = "$v" ] && continue  # known not to be served
        if resolve spark-all "org.apache.spark:spark-sql-kafka-0-10_2.13:$v" 2>/dev/null; then
            tr ':' '\n' < "$cache/spark-all" \
                | grep -E '/(spark-sql-kafka-0-10|spark-token-provider-kafka-0-10|kafka-clients|commons-pool2)_?[^/]*\.jar$' \
                | paste -sd: > "$cache/spark-classpath"
            echo "$v" > "$cache/spark-version"
            rm -f "$cache/spark-all"
            break
        fi
        [ "$v" = "$spark_version" ] && echo "$v" > "$cache/spark-missing"
    done
    complete "$cache/spark-classpath" \
        || { echo "kafka-oracle: no spark-sql-kafka-0-10_2.13 for pyspark $spark_version" \
                  "nor $SPARK_KAFKA_FALLBACK on Maven Central" >&2; exit 1; }
fi
echo "$KAFKA_VERSION" > "$(dirname "$cache")/VERSION"
