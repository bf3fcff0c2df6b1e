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

from kesque.protocol.api_keys import ApiKeys
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
        open(hold, "w").close()  # from now on every raft flush holds
        answers: list = []
        proposer = WireClient(addr, timeout=120)
        m = Msg(ApiKeys.CREATE_TOPICS, 7)
        body = m(
            topics=(
                m("CreatableTopic", name="held", num_partitions=1, replication_factor=1, assignments=(), configs=()),
            ),
            timeout=120_000,
            validate_only=False,
        )
        creating = threading.Thread(
            target=lambda: answers.append(proposer.request(ApiKeys.CREATE_TOPICS, 7, body)), daemon=True
        )
        try:
            creating.start()  # its TopicRecord needs a flush to commit
            assert _wait_for(hold + ".held"), "no raft flush was held"
            with WireClient(addr, timeout=20) as c:  # a new connection, while the flush is held
                assert Api(c).api_versions().error_code == 0
                topics = {t.name for t in Api(c).metadata(None).topics}
            assert os.path.exists(hold)  # still held: only this test removes it
            assert "held" not in topics and creating.is_alive() and not answers  # not committed
        finally:
            os.unlink(hold)
        creating.join(120)
        proposer.close()
        assert answers and answers[0].topics[0].error_code == 0
        with WireClient(addr) as c:
            assert "held" in {t.name for t in Api(c).metadata(None).topics}


def test_a_snapshot_past_the_durable_end_is_written_once_the_flush_completes(tmp_path):
    """A follower applies records the leader's majority holds, maybe before its own flush of
    them completes: RaftManager.snapshot then waits for the flush (the log refuses a snapshot
    past its durable end)."""
    import asyncio

    from kesque.raft import QuorumConfig
    from kesque.server.raft_manager import RaftManager

    async def run():
        mgr = RaftManager(1, {1: None}, str(tmp_path), QuorumConfig(append_linger_ms=0), None, None)
        mgr.start()
        await mgr.wait_caught_up()
        mgr.append([b"a", b"b"])
        while mgr.node.applied < 3:
            await asyncio.sleep(0.01)
        real = mgr.log.durable_end_offset
        mgr.log.durable_end_offset = lambda: 1  # as a follower whose flush is behind
        mgr.snapshot(3, [b"image"])
        assert mgr.log.latest_snapshot() is None and mgr._flush is not None
        mgr.log.durable_end_offset = real
        await asyncio.wait([mgr._flush])
        await asyncio.sleep(0)  # the flush's completion, on the loop
        assert mgr.log.latest_snapshot().end_offset == 3 and mgr.log.log_start_offset() == 3
        await mgr.close()

    asyncio.run(run())
