"""The KRaft quorum's and the broker lifecycle's logic on three combined nodes under the simulator
(kesque/sim/real.py, ``controllers="combined"``): the real ``KesqueServer`` nodes (broker and
controller each, ``controller.quorum.voters`` naming the three) on simulated time and network, as
tests/test_quorum_cluster.py runs them as processes. A kill is ``kill -9``; a restart is a new
server on the same files. These were process tests with sleeps and polls; the layout, the
timings and what each asserts are the same, in a fraction of a second each and deterministic."""

from __future__ import annotations

import asyncio

from kesque.sim.loop import deterministic_entropy
from kesque.sim.real import BROKERS, RealCluster, quiet_logs

NOT_CONTROLLER = 41
REQUEST_TIMED_OUT = 7
UNKNOWN_TOPIC_OR_PARTITION = 3
# tests/test_quorum_cluster.py's FAST_QUORUM
FAST_QUORUM = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.request.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
}
WAIT_S = 30.0  # the process tests' waits (simulated seconds here)


def _run(body, seed: int = 0) -> RealCluster:
    sim = RealCluster(seed, overrides=FAST_QUORUM, controllers="combined")
    try:
        with deterministic_entropy(sim.rng), quiet_logs():
            sim.start_all()
            sim.run(body(sim))
        assert not sim.failures, sim.failures
    finally:
        sim.close()
    return sim


async def _started(sim: RealCluster) -> int:
    """Every node started; the node id of the active controller."""
    await sim.until(lambda: all(n.ready for n in sim.nodes.values()), WAIT_S, "every node started")
    return await _leader(sim, BROKERS)


async def _leader(sim: RealCluster, among) -> int:
    """The active controller once it is one of ``among`` (and the only one active)."""
    await sim.until(
        lambda: (
            [n.node_id for n in sim.active_controllers()][:1] in [[a] for a in among]
            and len(sim.active_controllers()) == 1
        ),
        WAIT_S,
        f"one active controller among {among}",
    )
    return sim.active_controllers()[0].node_id


async def _placement(sim: RealCluster, node: int, topic: str) -> dict[int, int]:
    """{partition: leader} once ``node``'s broker knows ``topic``."""
    seen: dict = {}

    async def poll():
        seen.update(await sim.client.metadata(node, topic))

    deadline = sim.loop.time() + WAIT_S
    await poll()
    while not seen:
        assert sim.loop.time() < deadline, f"{topic} not in broker {node}'s metadata"
        await asyncio.sleep(0.1)
        await poll()
    return {p: leader for p, (leader, _isr) in seen.items()}


async def _live_brokers(sim: RealCluster, node: int) -> set[int]:
    resp = await sim.client.metadata_response(node, None)
    return {int(b.node_id) for b in resp.brokers}


def test_controller_failover_then_the_old_leader_rejoins():
    """Moved from tests/test_quorum_cluster.py: kill -9 of the active controller's node: another
    is elected, topics can still be created and are seen by the survivors; the killed node
    restarts, catches up and follows the new leader."""

    async def body(sim: RealCluster):
        leader = await _started(sim)
        assert await sim.client.create_topic(BROKERS[0], "before", 3, 3, {}) == 0
        sim.nodes[leader].kill()
        survivors = [b for b in BROKERS if b != leader]
        new_leader = await _leader(sim, survivors)
        assert new_leader != leader
        # rf 2: the killed broker is fenced once its session expires
        assert await sim.client.create_topic(survivors[0], "after", 3, 2, {}) == 0
        assert set(await _placement(sim, survivors[1], "after")) == {0, 1, 2}
        sim.nodes[leader].start()
        await sim.until(lambda: sim.nodes[leader].ready, WAIT_S, f"node {leader} restarted")
        assert set(await _placement(sim, leader, "after")) == {0, 1, 2}
        assert set(await _placement(sim, leader, "before")) == {0, 1, 2}
        assert await sim.client.quorum_leader(leader) == (await _leader(sim, BROKERS)) != leader

    _run(body)


def test_a_minority_commits_nothing_and_the_majority_loses_nothing():
    """Moved from tests/test_quorum_cluster.py: with two of three controllers down, CreateTopics
    times out (REQUEST_TIMED_OUT, the forwarding timeout) and no topic appears; once a majority
    is back, what was committed before is still there and the quorum commits again."""

    async def body(sim: RealCluster):
        await _started(sim)
        first, second, third = BROKERS
        assert await sim.client.create_topic(first, "kept", 3, 3, {}) == 0
        sim.nodes[second].kill()
        sim.nodes[third].kill()
        code = await sim.client.create_topic(first, "unsure", 3, 3, {}, timeout_ms=3000)
        assert code == REQUEST_TIMED_OUT, code
        # not committed, so not in the broker's image (the old leader may still hold it
        # uncommitted in its log: Raft may commit it later, as the client was told nothing)
        resp = await sim.client.metadata_response(first, ["unsure"])
        assert int(resp.topics[0].error_code) == UNKNOWN_TOPIC_OR_PARTITION
        sim.nodes[second].start()
        await sim.until(lambda: sim.nodes[second].ready, WAIT_S, f"node {second} restarted")
        assert set(await _placement(sim, second, "kept")) == {0, 1, 2}
        assert await sim.client.create_topic(second, "later", 3, 2, {}) == 0
        names = {t.name for t in (await sim.client.metadata_response(second, None)).topics}
        assert {"kept", "later"} <= names

    _run(body)


def test_a_killed_broker_is_fenced_after_its_session_and_comes_back():
    """Moved from tests/test_quorum_cluster.py (its SIGKILL is a kill -9 here): a killed broker is
    fenced once broker.session.timeout.ms passes without a heartbeat, and its leaderships move;
    restarted, it is unfenced once it has caught up."""

    async def body(sim: RealCluster):
        leader = await _started(sim)
        x = next(b for b in BROKERS if b != leader)
        assert await sim.client.create_topic(leader, "fenced", 3, 3, {}) == 0
        assert x in (await _placement(sim, leader, "fenced")).values()
        sim.nodes[x].kill()
        killed_at = sim.loop.time()
        fenced = set()

        async def poll():
            if x not in await _live_brokers(sim, leader):
                fenced.add(x)

        while not fenced:
            assert sim.loop.time() - killed_at < WAIT_S, "the fence"
            await asyncio.sleep(0.1)
            await poll()
        # not before the session (3 s) expired, and not long after
        assert 2.5 <= sim.loop.time() - killed_at <= 6, sim.loop.time() - killed_at
        assert x not in (await _placement(sim, leader, "fenced")).values()
        sim.nodes[x].start()
        await sim.until(lambda: sim.nodes[x].ready, WAIT_S, f"node {x} restarted")
        assert await _live_brokers(sim, leader) == set(BROKERS)

    _run(body)
