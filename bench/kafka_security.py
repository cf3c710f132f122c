"""What the Kafka listener's security costs, side by side in one run: PLAINTEXT, SASL_PLAINTEXT
(SCRAM-SHA-256), SSL (client certificates) and SASL_SSL, each on its own seglogd over loopback.

- confluent-kafka producer (defaults, acks=1) and consumer of 100-byte records: records/s
- a new client's first metadata (connect, ApiVersions, TLS handshake and/or SCRAM exchange,
  Metadata): median of 30 fresh producers, ms

Usage: ``python bench/kafka_security.py [--records 300000] [--iterations 8192]`` (needs FUSE and ``openssl``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from kafka_clients import confluent_consume, confluent_produce  # noqa: E402
from seglogd_process import port_of, start_seglogd, stop_seglogd, write_config  # noqa: E402
from support.kafka_certs import make_certs  # noqa: E402

from seglogfs.kafka.sasl_scram import make_credential  # noqa: E402

PASSWORD = "bench-password"


def first_metadata_ms(server: str, conf: dict[str, Any], runs: int = 30) -> float:
    from confluent_kafka import Producer

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        producer = Producer({"bootstrap.servers": server, **conf})
        producer.list_topics(timeout=10)
        times.append((time.perf_counter() - start) * 1000)
        del producer
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--iterations", type=int, default=8192, help="the SCRAM user's PBKDF2 iterations")
    args = parser.parse_args()
    n = args.records
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-kafka-security-") as tmp:
        base = Path(tmp)
        certs = make_certs(base)
        tls = {"ssl.certfile": str(certs.server), "ssl.keyfile": str(certs.server_key)}
        sasl = {
            "sasl.enabled.mechanisms": ["SCRAM-SHA-256"],
            "users": {"bench": make_credential(PASSWORD, args.iterations).to_yaml_fields()},
        }
        client_tls = {
            "ssl.ca.location": str(certs.ca),
            "ssl.certificate.location": str(certs.client),
            "ssl.key.location": str(certs.client_key),
        }
        client_sasl = {
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "bench",
            "sasl.password": PASSWORD,
        }
        cases = [
            ("PLAINTEXT", {}, {}),
            ("SASL_PLAINTEXT", sasl, client_sasl),
            ("SSL", {**tls, "ssl.cafile": str(certs.ca), "ssl.client.auth": "required"}, client_tls),
            ("SASL_SSL", {**tls, **sasl}, {**client_tls, **client_sasl}),
        ]
        for protocol, listener, client in cases:
            run = base / protocol
            run.mkdir()
            mount = run / "mnt"
            kafka = {"listeners": f"{protocol}://127.0.0.1:0", **listener}
            config = write_config(
                run / "seglogfs.yaml", run / "data", mount, {"segment.bytes": "1GiB"}, {}, kafka=kafka
            )
            proc = start_seglogd(config, mount, "multi")
            try:
                server = f"127.0.0.1:{port_of(run / 'seglogd.stderr')}"
                conf = {"security.protocol": protocol, **client}
                produced = confluent_produce(server, "p", n, conf)
                consumed = confluent_consume(server, "p", n, conf)
                first = first_metadata_ms(server, conf)
                rows.append((protocol, f"{produced:,.0f}", f"{consumed:,.0f}", f"{first:.1f}"))
            finally:
                stop_seglogd(proc, mount)
    print(f"{n:,} records of 100 bytes, loopback, confluent-kafka; SCRAM iterations {args.iterations}")
    print(f"{'listener':<16}{'produce rec/s':>16}{'consume rec/s':>16}{'first metadata ms':>20}")
    for protocol, produced_text, consumed_text, first_text in rows:
        print(f"{protocol:<16}{produced_text:>16}{consumed_text:>16}{first_text:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
