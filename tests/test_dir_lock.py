"""One broker per data directory: the ``.lock`` flock Kafka's LogManager takes on every log
dir (and KafkaRaftManager on a separate metadata log dir).

Without it a second broker on the same ``log.dirs`` served the same files and, on exit,
left ``.kafka_cleanshutdown`` in the live broker's dir, so a later crash of the live broker
skipped recovery.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer

from kesque.storage.dirs import LogDirError
from kesque.testing.broker import Broker
from wire import consume_all

MARKER = ".kafka_cleanshutdown"


def _refusal(b: Broker) -> str:
    with pytest.raises(RuntimeError, match=r"exited during start \(code 1\)"):
        b.start()
    with open(b.log_path) as f:
        return f.read()


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(10) == 0


def test_second_broker_on_same_dir_is_refused_and_first_recovers_after_crash(tmp_path):
    data = tmp_path / "data"
    first = Broker(data_dir=str(data)).start()
    try:
        _produce(first.bootstrap_servers, "locked", 5)
        second = Broker(data_dir=str(data), log_file=str(tmp_path / "second.log"))
        out = _refusal(second)
        assert f"Failed to acquire lock on file .lock in {data}" in out, out
        assert "another process or thread is using this directory" in out
        assert not (data / MARKER).exists(), "the refused broker wrote into the live broker's dir"
        _produce(first.bootstrap_servers, "locked", 5)
        assert [v for _o, v in consume_all(first.bootstrap_servers, "locked")[0]] == [
            b"v%d" % i for i in [*range(5), *range(5)]
        ]
        first.kill()  # the .lock file stays behind; the kernel dropped the flock
        assert (data / ".lock").exists()
        mark = os.path.getsize(first.log_path)
        first.start()
        with open(first.log_path) as f:
            f.seek(mark)
            started = f.read()
        assert "no clean shutdown marker: recovering" in started, started
        assert len(consume_all(first.bootstrap_servers, "locked")[0]) == 10
    finally:
        first.stop()


def test_second_broker_in_the_same_process_is_refused(tmp_path):
    first = Broker(data_dir=str(tmp_path / "data"), mode="thread").start()
    try:
        with pytest.raises(LogDirError, match="Failed to acquire lock on file .lock in"):
            Broker(data_dir=str(tmp_path / "data"), mode="thread").start()
        _produce(first.bootstrap_servers, "same-process", 3)
    finally:
        first.stop()
    again = Broker(data_dir=str(tmp_path / "data"), mode="thread").start()  # released on stop
    try:
        assert len(consume_all(again.bootstrap_servers, "same-process")[0]) == 3
    finally:
        again.stop()


def test_separate_metadata_log_dir_is_locked_too(tmp_path):
    meta = tmp_path / "meta"
    first = Broker(data_dir=str(tmp_path / "a"), config={"metadata.log.dir": str(meta)}).start()
    try:
        second = Broker(data_dir=str(tmp_path / "b"), config={"metadata.log.dir": str(meta)})
        out = _refusal(second)
        assert f"Failed to acquire lock on file .lock in {meta}" in out, out
    finally:
        first.stop()
