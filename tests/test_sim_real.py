"""The real broker under the simulator (kesque/sim/loop.py, kesque/sim/real.py): KesqueServer
nodes on a deterministic event loop and a simulated network, in this process, with no thread
and no sleep. A failure's message ends with its replay command, e.g.
``python -m kesque.sim --scenario real_acks_all --seed 3``."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import random
import sys

import pytest

from kesque.sim import InvariantViolation, SimulationError, run
from kesque.sim.loop import Deadlock, Process, SimLoop
from kesque.sim.real_scenarios import REAL_SCENARIOS, real_acks_all, real_controller_quorum, real_power_loss
from kesque.sim.real_txn import TxnLedger, check_exactly_once, value_of
from sim_seeds import seeds, unmeasured

real_disk_failure_short = REAL_SCENARIOS["real_disk_failure_short"]
SEEDS = 3  # each a few simulated seconds of a 4-node cluster: about a second of CPU
BUG_SEEDS = 10
# coverage measures the first seed of the acks=all and quorum loops and not the replays (its
# tracer makes a seed two to four times dearer, and they run the same code again); every seed of
# the transactions (each reaches its own coordinator paths) and of real_disk_failure (each draws
# another write point to fail); tests/test_sim_real_sweep*.py run their seeds unmeasured


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data.upper())


class _Client(asyncio.Protocol):
    def __init__(self):
        loop = asyncio.get_running_loop()
        self.got, self.lost = loop.create_future(), loop.create_future()

    def data_received(self, data):
        if not self.got.done():
            self.got.set_result(data)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def _serve(loop: SimLoop, proc: Process, port: int):
    """A listener of ``proc`` that echoes in upper case (SocketServer-style: accept on readable)."""

    async def start():
        sock = loop.new_socket()
        sock.bind((proc.host, port))
        sock.listen()

        def accept():
            conn, _addr = sock.accept()
            loop._make_socket_transport(conn, _Echo())

        loop.add_reader(sock.fileno(), accept)

    return loop.spawn(proc, start())


def test_the_loop_jumps_time_and_runs_no_thread():
    loop = SimLoop(random.Random(1))
    seen = []

    async def main():
        t0 = loop.time()
        await asyncio.sleep(3600)
        seen.append(loop.time() - t0)
        loop.call_soon_threadsafe(seen.append, "soon")
        seen.append(await loop.run_in_executor(None, lambda: "inline"))

    loop.run_until_complete(main())
    loop.close()
    assert seen == [3600, "soon", "inline"] or seen == [3600, "inline", "soon"]


def test_a_killed_process_runs_nothing_more_and_its_connections_reset():
    loop = SimLoop(random.Random(2))
    server, client = Process("server", "10.0.0.1"), Process("client", "10.0.0.9")
    ticks = []

    async def tick():
        while True:
            ticks.append(loop.time())
            await asyncio.sleep(1)

    async def main():
        await _serve(loop, server, 9092)
        loop.spawn(server, tick())
        transport, proto = await loop.create_connection(_Client, "10.0.0.1", 9092)
        transport.write(b"ping")
        assert await proto.got == b"PING"
        await asyncio.sleep(2.5)
        loop.net.kill(server)
        assert isinstance(await proto.lost, ConnectionResetError)
        n = len(ticks)
        await asyncio.sleep(10)
        assert len(ticks) == n == 3  # t=0, 1, 2: none after the kill
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, "10.0.0.1", 9092)

    loop.run_until_complete(loop.spawn(client, main()))
    loop.close()


def test_a_cut_resets_connections_and_refuses_new_ones_until_healed():
    loop = SimLoop(random.Random(3))
    server, client = Process("server", "10.0.0.1"), Process("client", "10.0.0.9")

    async def main():
        await _serve(loop, server, 9092)
        _transport, proto = await loop.create_connection(_Client, "10.0.0.1", 9092)
        loop.net.cut("10.0.0.9", "10.0.0.1")
        assert isinstance(await proto.lost, ConnectionResetError)
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, "10.0.0.1", 9092)
        loop.net.heal()
        await loop.create_connection(asyncio.Protocol, "10.0.0.1", 9092)

    loop.run_until_complete(loop.spawn(client, main()))
    loop.close()


_VAR: contextvars.ContextVar = contextvars.ContextVar("test_sim_real_var", default=None)
_GC_NOISE = ("Event loop is closed", "different Context", "Exception ignored")


def _unraisable_and_logs(monkeypatch, caplog) -> list[str]:
    """What the run and the collection of its garbage print: unraisable exceptions (a coroutine
    closed by the garbage collector) and log records."""
    caught: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: caught.append(f"{u.err_msg}: {u.exc_value!r}"))
    caplog.set_level(logging.WARNING)
    return caught


def test_a_killed_process_s_coroutines_are_closed_in_their_context_with_the_loop(monkeypatch, caplog):
    """A dead process's coroutine waits in a try/finally that resets a context variable and
    completes a future (a call_soon): closed when the loop closes, in its own context and with
    the loop still open, nothing fails; the garbage collector later finds nothing left to close."""
    caught = _unraisable_and_logs(monkeypatch, caplog)
    loop = SimLoop(random.Random(5))
    node, client = Process("node", "10.0.0.1"), Process("client", "10.0.0.9")
    closed = []

    async def waiter():
        token = _VAR.set("node")
        done = asyncio.get_running_loop().create_future()
        try:
            await asyncio.sleep(3600)
        finally:
            _VAR.reset(token)
            done.set_result(None)
            closed.append(asyncio.get_running_loop() is loop)

    async def main():
        loop.spawn(node, waiter())
        loop.spawn(node, waiter())
        await asyncio.sleep(1)
        loop.net.kill(node)
        await asyncio.sleep(1)

    loop.run_until_complete(loop.spawn(client, main()))
    loop.close()
    gc.collect()
    assert closed == [True, True]
    assert caught == [] and not caplog.records, (caught, caplog.text)


def test_a_run_with_kills_prints_nothing_once_over(monkeypatch, caplog, capfd):
    """A run with controllers and brokers killed, the garbage collector running often: no
    coroutine of a killed server is left suspended once the run is over, and nothing is printed
    (no "Event loop is closed" from one collected after its loop closed, no context variable
    reset in another context by one collected mid-run)."""
    caught = _unraisable_and_logs(monkeypatch, caplog)
    saved = gc.get_threshold()
    gc.set_threshold(50)
    try:
        sim = real_controller_quorum(3)
    finally:
        gc.set_threshold(*saved)
    assert any(f.startswith("kill") for f in sim.fault_log)
    left = [t for t in asyncio.all_tasks(sim.loop) if t.get_coro().cr_frame is not None]
    assert not left, left[:3]
    del sim
    gc.collect()
    out, err = capfd.readouterr()
    noise = [line for line in caught + [caplog.text, out, err] if any(n in line for n in _GC_NOISE)]
    assert not noise, noise


def test_nothing_left_to_run_is_a_deadlock():
    loop = SimLoop(random.Random(4))
    with pytest.raises(Deadlock):
        loop.run_until_complete(loop.create_future())
    loop.close()


def test_acks_all_through_kills_and_cuts_holds():
    for seed in seeds(SEEDS, measured=1):
        r = run("real_acks_all", seed)
        assert r.committed >= 100, f"seed {seed} acknowledged only {r.committed}: {r.replay()}"


def test_a_controller_quorum_through_kills_and_cuts_of_the_active_controller_holds():
    """Three KRaft controllers and three brokers; the faults fall on the controllers as often as
    on the brokers, the active one among them: no acknowledged record is lost, replicas agree,
    and once healed one controller is active and every partition led with a full ISR."""
    faults = []
    for seed in seeds(2, measured=1):  # seed 0 kills and isolates the active controller
        r = run("real_controller_quorum", seed)
        assert r.committed >= 100, f"seed {seed} acknowledged only {r.committed}: {r.replay()}"
        faults += r.faults
    assert any(f.startswith("kill") and f.endswith("(the active controller)") for f in faults), faults
    assert any(f.startswith("isolate") and f.endswith("(the active controller)") for f in faults), faults


def test_a_real_seed_replays_exactly():
    """Same seed, same run: every byte delivered, at the same simulated time, on the same link."""
    a = real_acks_all(1)
    with unmeasured():
        b, c = real_acks_all(1), real_acks_all(3)
    assert a.loop.net.delivered > 1000
    assert (a.trace_hash, a.loop.net.delivered, a.s.now, a.inv.committed) == (
        b.trace_hash,
        b.loop.net.delivered,
        b.s.now,
        b.inv.committed,
    )
    assert c.trace_hash != a.trace_hash


def test_acks_all_answered_before_the_isr_has_the_records_is_caught():
    for seed in seeds(BUG_SEEDS, measured=1):
        try:
            run("real_acks_all", seed, "acks_all_before_isr")
        except InvariantViolation as e:
            assert "acknowledged" in str(e) and "--bug acks_all_before_isr" in str(e)
            return
    pytest.fail(f"no invariant caught acks_all_before_isr in {BUG_SEEDS} seeds")


def test_a_power_loss_keeps_what_was_fsynced_and_loses_no_acknowledged_record():
    """A broker loses power (its disk keeps what it fsynced: about nothing of its partitions,
    Kafka acknowledges before fsync) and comes back; the others held every record."""
    r = run("real_power_loss", 2)
    assert r.committed >= 100


def test_the_last_known_leader_back_from_a_power_loss_is_elected_as_kafka_does():
    """Seed 35 (found by a 100-seed sweep): the leader, the last ISR member, loses power; the other
    replicas were taken out of the ISR and the ELR as they registered after a kill -9 (Kafka
    cannot tell one from a power loss). Kafka 4.4 then elects the last known leader without
    unclean.leader.election.enable (PartitionChangeBuilder's canElectLastKnownLeader), its log
    all but empty, and marks it RECOVERING: what was acknowledged before is lost, in Kafka too.
    The ledger forgets that partition's acknowledgements from the election on, the replicas are
    compared at the end, and nothing else is excused."""
    sim = real_power_loss(35)
    assert any(f.startswith("last known leader 3 of t-0 elected after its power loss") for f in sim.fault_log)
    assert sim.inv.forgotten > 0 and sim.inv.committed > 0


def test_a_broker_back_from_a_power_loss_before_it_is_fenced_serves_nothing_until_registered():
    """Seed 3 restarts the broker that lost power before the controller fenced its old
    incarnation: it replays an image in which it still leads, with the empty log the cut left.
    It lost acknowledged records while it served followers from that image before its
    registration was accepted; it now accepts connections only once registered and caught up."""
    r = run("real_power_loss", 3)
    assert r.committed >= 100


def test_transactions_through_kills_and_cuts_are_exactly_once():
    """Transactional consume-transform-produce workers (TV1 and TV2 clients) and their group's
    offsets through broker kills and cuts: read_committed shows exactly the committed
    transactions, the committed offsets match them, and no transaction hangs."""
    for seed in range(SEEDS):
        r = run("real_transactions", seed)
        assert r.committed >= 30, f"seed {seed} committed only {r.committed} records: {r.replay()}"


def test_a_marker_reported_written_but_never_appended_is_caught():
    for seed in range(BUG_SEEDS):
        try:
            run("real_transactions", seed, "skip_last_marker")
        except SimulationError as e:
            assert "--bug skip_last_marker" in str(e)
            return
    pytest.fail(f"no invariant caught skip_last_marker in {BUG_SEEDS} seeds")


def _ledger(*txns):
    ledger = TxnLedger()
    for worker, lo, hi, state, partition in txns:
        txn = ledger.begin(worker, lo, hi, False)
        txn.state = state
        txn.values = {value_of(worker, n, txn.attempt): partition for n in range(lo, hi)}
    return ledger


@pytest.mark.parametrize(
    ("txns", "read", "positions", "message"),
    [
        ([(0, 0, 2, "committed", 0)], {0: [b"0-0-1", b"0-1-1"]}, {0: 2, 1: 0, 2: 0}, None),
        ([(0, 0, 2, "aborted", 0)], {0: [b"0-0-1"]}, {0: 0, 1: 0, 2: 0}, "aborted"),
        ([(0, 0, 2, "open", 0)], {0: [b"0-0-1", b"0-1-1"]}, {0: 2, 1: 0, 2: 0}, "never committed"),
        ([(0, 0, 2, "committed", 0)], {0: [b"0-0-1"]}, {0: 2, 1: 0, 2: 0}, "lacks"),
        ([(0, 0, 2, "commit?", 0)], {0: [b"0-0-1"]}, {0: 2, 1: 0, 2: 0}, "half visible"),
        ([(0, 0, 2, "commit?", 0)], {0: []}, {0: 0, 1: 0, 2: 0}, None),
        (
            [(0, 0, 1, "committed", 0), (0, 0, 1, "commit?", 1)],
            {0: [b"0-0-1"], 1: [b"0-0-2"]},
            {0: 1, 1: 0, 2: 0},
            "twice",
        ),
        ([(0, 0, 2, "committed", 0)], {0: [b"0-0-1", b"0-1-1"]}, {0: 1, 1: 0, 2: 0}, "exactly once"),
        ([(0, 0, 2, "committed", 0)], {1: [b"0-0-1", b"0-1-1"]}, {0: 2, 1: 0, 2: 0}, "no transaction wrote"),
    ],
)
def test_the_exactly_once_check_catches_each_broken_rule(txns, read, positions, message):
    ledger = _ledger(*txns)
    if message is None:
        check_exactly_once(ledger, read, positions)
    else:
        with pytest.raises(InvariantViolation, match=message):
            check_exactly_once(ledger, read, positions)


def test_a_failed_log_dir_goes_offline_and_loses_no_acknowledged_record():
    """A broker with two log dirs has one fail mid-run (ENOSPC or EIO at a segment append, a
    checkpoint or an fsync; seeds 0-2 draw each point once): nothing is written there after, the
    controller moves its partitions off it, and no acknowledged record is lost."""
    for seed in range(SEEDS):
        r = run("real_disk_failure", seed)
        assert r.committed >= 100, f"seed {seed} acknowledged only {r.committed}: {r.replay()}"


def test_a_failed_dir_s_replica_added_back_to_the_isr_leaves_it_once_the_partition_is_written():
    """Seed 84 of real_disk_failure_short (found by a 100-seed sweep): broker 4's dir holding t-1
    fails at a checkpoint; the controller takes its replica out of t-1's ISR, and 10 ms later
    leader 3 adds it back, from a fetch broker 4 sent before: Kafka's Partition and controller
    check fenced, shutting down and the broker epoch, not the directory, and the controller acts
    on an offline dir once. A leader keeps a follower at its log end in the ISR (Kafka's
    Replica.isCaughtUp), so the quiet partition kept it for good; the scenario's client now
    writes to such a partition after 5 s, and the replica leaves the ISR once it lags, as in
    Kafka."""
    sim = real_disk_failure_short(84)
    assert "probe t-1: broker 4 back in its ISR" in sim.fault_log
    assert sim.inv.committed >= 100


def test_a_log_that_keeps_writing_after_an_io_error_is_caught():
    """``--bug keep_writing_after_io_error``: an I/O error fails the call only, the log and its dir
    stay online; the dir's next write (a segment, a checkpoint) breaks the rule that nothing is
    written to a log dir after its first failed write."""
    for seed in range(20):
        try:
            run("real_disk_failure", seed, "keep_writing_after_io_error")
        except InvariantViolation as e:
            assert "after its log dir" in str(e) and "--bug keep_writing_after_io_error" in str(e)
            return
    pytest.fail("no invariant caught keep_writing_after_io_error in 20 seeds")


def test_a_run_leaves_no_descriptor_open():
    """A killed node's files stay open while the run goes on (its process is dead, its objects
    never run again); once the run ends, its descriptors are closed as the kernel would close a
    dead process's. Before, each seed left 20-70 behind, and a worker that swept a hundred seeds
    failed later tests with select()'s "filedescriptor out of range"."""
    import os

    before = len(os.listdir("/proc/self/fd"))
    run("real_acks_all_short", 0)
    run("real_power_loss_short", 1)
    assert len(os.listdir("/proc/self/fd")) == before
