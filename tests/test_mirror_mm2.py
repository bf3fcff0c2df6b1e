"""Issue 28: "MirrorMaker 2 itself already works against kesque, exactly-once included; keep it
working". Apache Kafka's MirrorMaker 2 (4.3.1, dedicated mode, ``make mm2``) copies a topic of
plain and transactional records between two kesque brokers with exactly-once source support
(KIP-618) on the target: the destination's read_committed readers see every committed source
record once, and no aborted one. Marker ``mirror`` (``make mirror``); skipped without build/mm2."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from kesque.records import batch as rb
from mirrorlib import raw_batches, read_committed, thread_brokers

pytestmark = pytest.mark.mirror

MM2_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "mm2")
REASON = None if os.path.exists(os.path.join(MM2_DIR, ".resolved")) else "build/mm2 missing: run make mm2"


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_mirror_maker_2_copies_exactly_once_between_kesque_brokers(tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with thread_brokers() as (src, dst):
        s, d = src.bootstrap_servers, dst.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": s})
        for fut in admin.create_topics([NewTopic("copied", 2, 1)]).values():
            fut.result(15)
        plain = Producer({"bootstrap.servers": s, "linger.ms": 0})
        for i in range(100):
            plain.produce("copied", f"plain-{i}".encode(), partition=i % 2)
        assert plain.flush(15) == 0
        txn = Producer({"bootstrap.servers": s, "transactional.id": "mm2-src", "linger.ms": 0})
        txn.init_transactions(15)
        for outcome in ("commit", "abort", "commit"):
            txn.begin_transaction()
            for i in range(10):
                txn.produce("copied", f"txn-{outcome}-{i}".encode(), partition=i % 2)
            txn.flush(15)
            (txn.commit_transaction if outcome == "commit" else txn.abort_transaction)(15)
        want = sorted([f"plain-{i}".encode() for i in range(100)] + [f"txn-commit-{i}".encode() for i in range(10)] * 2)
        internal = ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage", "status.storage")
        props = tmp_path / "mm2.properties"
        props.write_text(
            f"clusters=A,B\nA.bootstrap.servers={s}\nB.bootstrap.servers={d}\nA->B.enabled=true\n"
            "A->B.topics=copied\nB->A.enabled=false\nreplication.factor=1\nconfig.storage.replication.factor=1\n"
            + "".join(f"{k}.replication.factor=1\n" for k in internal)
            + "sync.topic.acls.enabled=false\nsync.topic.configs.enabled=false\ntasks.max=2\n"
            "B.exactly.once.source.support=enabled\nA.consumer.isolation.level=read_committed\n"
        )
        log = open(tmp_path / "mm2.log", "w")
        mm = subprocess.Popen(
            ["java", "-Xmx384m", "-cp", os.path.join(MM2_DIR, "*"), "org.apache.kafka.connect.mirror.MirrorMaker",
             str(props)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            got: list = []
            while time.monotonic() < deadline:
                got = sorted(v for recs in read_committed(d, "A.copied", 2, timeout=5).values() for _o, v in recs)
                if len(got) >= len(want):
                    break
                time.sleep(1)
        finally:
            mm.kill()
            mm.wait()
            log.close()
        assert got == want, (len(got), len(want), (tmp_path / "mm2.log").read_text()[-3000:])
        # exactly-once source support on: MirrorMaker 2 wrote the copy in transactions (markers)
        headers = [rb.read_header(b, 0) for p in range(2) for _o, b in raw_batches(dst.data_dir, "A.copied", p)]
        assert any(h.is_control for h in headers)
        assert all(h.is_transactional for h in headers), [h.attributes for h in headers]
