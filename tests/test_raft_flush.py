"""The metadata log's fsync runs off the event loop, on a real broker process.

A test-only hook (``KESQUE_TEST_RAFT_FLUSH_HOLD``, read by ``server/raft_manager.py``) holds every
raft flush in its worker thread while a file exists, and says so by creating ``<file>.held``. The
test holds the flush, proposes a topic, and while the flush is *known* to be held (the marker is
there, the hold file is ours to remove, and the lone voter cannot commit the topic without it)
asks the same broker for ApiVersions and Metadata: they are answered. With the fsync back on the
event loop the broker answers nothing until the hold is lifted, and the test fails on its
client's timeout (a bound against hanging, not a timing assertion).
"""

from __future__ import annotations

import os
import threading
import time

from kesque.testing.broker import Broker
from wire import Api, Msg, WireClient


def _wait_for(path: str, bound_s: float = 60.0) -> bool:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return False


def test_requests_are_answered_while_a_raft_flush_is_held(tmp_path, monkeypatch):
    hold = str(tmp_path / "hold-raft-flush")
    monkeypatch.setenv("KESQUE_TEST_RAFT_FLUSH_HOLD", hold)
    with Broker(data_dir=str(tmp_path / "data")) as b:
        addr = ("127.0.0.1", b.port)
        open(hold, "w").close()                     # from now on every raft flush holds
        answers: list = []
        proposer = WireClient(addr, timeout=120)
        m = Msg(19, 7)
        body = m(topics=(m("CreatableTopic", name="held", num_partitions=1, replication_factor=1,
                           assignments=(), configs=()),), timeout=120_000, validate_only=False)
        creating = threading.Thread(target=lambda: answers.append(proposer.request(19, 7, body)), daemon=True)
        try:
            creating.start()                         # its TopicRecord needs a flush to commit
            assert _wait_for(hold + ".held"), "no raft flush was held"
            with WireClient(addr, timeout=20) as c:  # a new connection, while the flush is held
                assert Api(c).api_versions().error_code == 0
                topics = {t.name for t in Api(c).metadata(None).topics}
            assert os.path.exists(hold)              # still held: only this test removes it
            assert "held" not in topics and creating.is_alive() and not answers   # not committed
        finally:
            os.unlink(hold)
        creating.join(120)
        proposer.close()
        assert answers and answers[0].topics[0].error_code == 0
        with WireClient(addr) as c:
            assert "held" in {t.name for t in Api(c).metadata(None).topics}
