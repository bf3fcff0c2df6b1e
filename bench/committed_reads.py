"""What a coordinator read costs now that it shows committed state only (issue 14 item 6,
docs/architecture.md "reads show committed state only"). One node in this process, the
group coordinator with one ``__consumer_offsets`` partition holding ``--commits`` offset
commits. Prints ratios, asserts nothing:

* a read with nothing uncommitted (``read_shard``) against the bare shard lookup (``shard_for``);
* the first read with something uncommitted (the committed view is built: a full replay)
  against the shard's own load time;
* a later read with one more committed commit (the view replays just that) against the
  bare lookup.

    python bench/committed_reads.py [--commits 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

from kesque.protocol.api_keys import ApiKeys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # this checkout's kesque, and the tests' wire client

from kesque.testing.broker import Broker  # noqa: E402
from wire import Api, Msg, WireClient  # noqa: E402

TOPIC = "t-reads"


def on_loop(b, fn):
    async def run():
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), b._loop).result(600)


def commit_body(group: str, offset: int):
    m = Msg(ApiKeys.OFFSET_COMMIT, 8)
    return m(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            m(
                "OffsetCommitRequestTopic",
                name=TOPIC,
                partitions=(
                    m(
                        "OffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def timed(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=20000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        b = Broker(data_dir=d, mode="thread", config={"offsets.topic.num.partitions": "1"}).start()
        try:
            with WireClient(b.bootstrap_servers) as c:
                Api(c).create_topic(TOPIC)
                deadline = time.monotonic() + 30  # __consumer_offsets is created on first use
                fc = Msg(ApiKeys.FIND_COORDINATOR, 4)
                while (
                    c.request(ApiKeys.FIND_COORDINATOR, 4, fc(key_type=0, coordinator_keys=("g0",)))
                    .coordinators[0]
                    .error_code
                    or c.request(ApiKeys.OFFSET_COMMIT, 8, commit_body("g0", 0)).topics[0].partitions[0].error_code
                ):
                    assert time.monotonic() < deadline, "no group coordinator"
                    time.sleep(0.05)
                for i in range(args.commits):
                    assert (
                        c.request(ApiKeys.OFFSET_COMMIT, 8, commit_body(f"g{i % 1000}", i))
                        .topics[0]
                        .partitions[0]
                        .error_code
                        == 0
                    )
            gc = b._server.group_coordinator
            part = b._server.replica_manager.partitions[("__consumer_offsets", 0)]
            lookup = on_loop(b, lambda: timed(lambda: gc.shard_for("g1"), 20000))
            live = on_loop(b, lambda: timed(lambda: gc.read_shard("g1"), 20000))
            # a reload measures the load a view's first build repeats
            on_loop(b, lambda: (gc._unload(0), gc._load(0)))
            load_s = gc.load_seconds[0]
            on_loop(b, lambda: setattr(part, "maybe_increment_high_watermark", lambda: False))
            with WireClient(b.bootstrap_servers) as c:
                c.send(ApiKeys.OFFSET_COMMIT, 8, commit_body("g1", 10**9))
                while part.log.high_watermark == part.log.log_end_offset:
                    time.sleep(0.01)
            build = on_loop(b, lambda: timed(lambda: gc.read_shard("g1"), 1))
            again = on_loop(b, lambda: timed(lambda: gc.read_shard("g1"), 20000))

            def commit_one_more():  # the pending commit and one more get committed; a third stays pending
                del part.maybe_increment_high_watermark
                part.maybe_increment_high_watermark()

            on_loop(b, commit_one_more)
            with WireClient(b.bootstrap_servers) as c:
                assert c.request(ApiKeys.OFFSET_COMMIT, 8, commit_body("g2", 1)).topics[0].partitions[0].error_code == 0
                on_loop(b, lambda: setattr(part, "maybe_increment_high_watermark", lambda: False))
                c.send(ApiKeys.OFFSET_COMMIT, 8, commit_body("g3", 1))
                while part.log.high_watermark == part.log.log_end_offset:
                    time.sleep(0.01)
            step = on_loop(b, lambda: timed(lambda: gc.read_shard("g1"), 1))
            print(f"offset commits in the partition: {args.commits}")
            print(f"read, nothing uncommitted: {live * 1e6:.2f} us, {live / lookup:.2f}x the bare shard lookup")
            print(
                f"first read with a write pending (view built): {build * 1e3:.1f} ms, "
                f"{build / load_s:.2f}x the partition's load time ({load_s * 1e3:.1f} ms)"
            )
            print(f"read from an up-to-date view: {again * 1e6:.2f} us, {again / lookup:.2f}x the bare lookup")
            print(f"read catching the view up by 2 commits: {step * 1e6:.0f} us, {step / lookup:.0f}x the bare lookup")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
