"""``kesque metadata-quorum`` (kafka-metadata-quorum.sh) without a broker: the summary and the
replication table built from a DescribeQuorum answer, and the tool's usage errors.
tests/test_oracle_quorum.py compares the same with Kafka's tool on a 3-node Kafka."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.describe_quorum.v2 import response as R

from kesque.cli import metadata_quorum as MQ

NOW = 1_795_607_645_300
DIR2 = uuid.UUID(int=7)


def replica(node: int, leo: int, fetch: int = -1, caught_up: int = -1, directory=None):
    return R.ReplicaState(
        replica_id=node,
        replica_directory_id=directory,
        log_end_offset=leo,
        last_fetch_timestamp=fetch,
        last_caught_up_timestamp=caught_up,
    )


def partition(voters, observers=(), leader: int = 2):
    return R.PartitionData(
        partition_index=0,
        error_code=0,
        error_message=None,
        leader_id=leader,
        leader_epoch=4,
        high_watermark=106,
        current_voters=tuple(voters),
        observers=tuple(observers),
    )


NODES = tuple(
    R.Node(node_id=i, listeners=(R.Listener(name="CONTROLLER", host="127.0.0.1", port=9000 + i),)) for i in (1, 2, 3)
)
VOTERS = [
    replica(1, 100, NOW - 300, NOW - 350),
    replica(2, 107, NOW - 5, NOW - 5, DIR2),
    replica(3, 107, NOW - 200, NOW - 200),
]


def test_status_summary():
    text = MQ.status_text("9jJtswNXSd2oGmHMj4V4rg", partition(VOTERS, [replica(4, 90)]), NODES)
    assert text == (
        "ClusterId:              9jJtswNXSd2oGmHMj4V4rg\n"
        "LeaderId:               2\n"
        "LeaderEpoch:            4\n"
        "HighWatermark:          106\n"
        "MaxFollowerLag:         7\n"
        "MaxFollowerLagTimeMs:   345\n"  # the leader's last caught-up time minus the laggard's
        'CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:9001"]}, '
        '{"id": 2, "directoryId": "AAAAAAAAAAAAAAAAAAAABw", "endpoints": ["CONTROLLER://127.0.0.1:9002"]}, '
        '{"id": 3, "endpoints": ["CONTROLLER://127.0.0.1:9003"]}]\n'
        'CurrentObservers:       [{"id": 4}]\n'
    )


def test_lag_time_is_zero_when_the_leader_is_the_laggard_and_unknown_without_timestamps():
    level = [replica(2, 107), replica(1, 107, NOW - 9, NOW - 9)]  # the first of the smallest: the leader
    assert "MaxFollowerLagTimeMs:   0\n" in MQ.status_text("c", partition(level), NODES)
    unknown = [replica(1, 100), replica(2, 107, NOW, NOW)]
    assert "MaxFollowerLagTimeMs:   -1\n" in MQ.status_text("c", partition(unknown), NODES)


def test_replication_rows_leader_then_followers_then_observers(monkeypatch):
    part = partition(VOTERS, [replica(4, 90)])
    assert MQ.replication_rows(part, False) == [
        ["2", "AAAAAAAAAAAAAAAAAAAABw", "107", "0", str(NOW - 5), str(NOW - 5), "Leader"],
        ["1", "AAAAAAAAAAAAAAAAAAAAAA", "100", "7", str(NOW - 300), str(NOW - 350), "Follower"],
        ["3", "AAAAAAAAAAAAAAAAAAAAAA", "107", "0", str(NOW - 200), str(NOW - 200), "Follower"],
        ["4", "AAAAAAAAAAAAAAAAAAAAAA", "90", "17", "-1", "-1", "Observer"],
    ]
    monkeypatch.setattr(MQ.time, "time", lambda: NOW / 1000)
    rows = MQ.replication_rows(part, True)
    assert [r[4:6] for r in rows] == [
        ["5 ms ago", "5 ms ago"],
        ["300 ms ago", "350 ms ago"],
        ["200 ms ago", "200 ms ago"],
        ["-1", "-1"],
    ]


def test_a_timestamp_in_the_future_is_kafkas_clock_drift_error():
    with pytest.raises(MQ.JavaError) as e:
        MQ.relative_time_ms(NOW + 10, "last fetch", now_ms=NOW)
    assert e.value.message == (
        "Error while computing relative time, possible drift in system clock.\n"
        f"Current timestamp is {NOW}, last fetch timestamp is {NOW + 10}"
    )


def test_no_leader_among_the_voters_is_javas_empty_optional():
    with pytest.raises(MQ.JavaError, match="No value present"):
        MQ.replication_rows(partition(VOTERS, leader=-1), False)


@pytest.mark.parametrize(
    "argv,err",
    [
        (
            ["describe", "--status"],
            "kafka-metadata-quorum: error: one  of  the  arguments --bootstrap-server --\n"
            "bootstrap-controller is required\n",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:9", "describe"],
            "One of --status or --replication must be specified with describe sub-command\n",
        ),
        (
            ["--bootstrap-server", "127.0.0.1:9", "describe", "--status", "--human-readable"],
            "The option --human-readable is only supported along with --replication\n",
        ),
        (
            [
                "--bootstrap-server",
                "127.0.0.1:9",
                "--command-config",
                "/nonexistent.properties",
                "describe",
                "--status",
            ],
            "Properties file /nonexistent.properties does not exist.\n",
        ),
    ],
)
def test_usage_errors(capsys, monkeypatch, argv, err):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("kesque.cli.plumbing.argparse4j.format_width", lambda: 75)
    assert MQ.main(argv) == 1
    assert capsys.readouterr().err.endswith(err)


def test_nothing_answering_names_the_server(capsys):
    assert MQ.main(["--bootstrap-server", "127.0.0.1:9", "describe", "--status"]) == 1
    assert capsys.readouterr().err == (
        "org.apache.kafka.common.errors.TimeoutException: Could not connect to the "
        "bootstrap server 127.0.0.1:9 (Connection refused)\n"
    )
