"""Quorum settings that cannot work stop the start with an error naming the setting, and
nothing is written to the data directory."""

from __future__ import annotations

import os

import pytest

from test_serve import _refused

VOTERS = "controller.quorum.voters"
BOOTSTRAP = "controller.quorum.bootstrap.servers"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            {VOTERS: "2@127.0.0.1:9093,3@127.0.0.1:9094"},
            "The node id 1 runs the controller role (process.roles=broker,controller) but is not in the set of voters "
            "controller.quorum.voters={2, 3}",
        ),
        (
            {"process.roles": "controller", VOTERS: "2@127.0.0.1:9093"},
            "If process.roles contains just the 'controller' role, the node id 1 must be included in the set of voters "
            "controller.quorum.voters={2}",
        ),
        (
            {"process.roles": "broker"},
            "process.roles=broker needs the controllers: set controller.quorum.voters or "
            "controller.quorum.bootstrap.servers",
        ),
        (
            {VOTERS: "1@127.0.0.1:9093,1@127.0.0.1:9094"},
            "Invalid value 1@127.0.0.1:9093,1@127.0.0.1:9094 for "
            "configuration controller.quorum.voters: node id 1 appears more than once",
        ),
        ({BOOTSTRAP: "10.1.2.3:9093"}, "controller.quorum.bootstrap.servers names 10.1.2.3:9093, not this node"),
    ],
)
def test_a_quorum_that_cannot_work_is_refused(tmp_path, overrides, message):
    data = tmp_path / "data"
    out = _refused(overrides, data)
    assert f"kesque: configuration error: {message}" in out, out
    assert not data.exists() or not os.listdir(data)


def test_quorum_timing_keys_are_known_checked_and_read(caplog):
    """controller.quorum.* timings are kesque settings: a bad value is refused naming the key,
    a good one is used (not warned about as a Kafka key kesque ignores)."""
    from kesque.config import BrokerConfig
    from kesque.config.types import ConfigError
    from kesque.server.raft_manager import quorum_config

    with pytest.raises(ConfigError, match="controller.quorum.fetch.timeout.ms"):
        BrokerConfig({"controller.quorum.fetch.timeout.ms": "soon"})
    with caplog.at_level("WARNING", logger="kesque.config"):
        cfg = BrokerConfig(
            {"controller.quorum.fetch.timeout.ms": "700", "controller.quorum.election.timeout.ms": "300"}
        )
    assert not [r for r in caplog.records if "controller.quorum" in r.getMessage()]
    qc = quorum_config(cfg)
    assert (qc.fetch_timeout_ms, qc.election_timeout_ms, qc.append_linger_ms) == (700, 300, 25)
    assert quorum_config(cfg, lone_voter=True).append_linger_ms == 0  # unset: a lone voter flushes at once
    lingering = BrokerConfig({"controller.quorum.append.linger.ms": "25"})
    assert quorum_config(lingering, lone_voter=True).append_linger_ms == 25  # set: as asked


def test_an_idle_followers_long_poll_ends_before_its_fetch_timeout():
    """A leader with nothing new parks a follower's Fetch for the long poll; answered only at
    Kafka's 500 ms against a 500 ms controller.quorum.fetch.timeout.ms, the follower's timer ran
    out first, it went prospective, and elections churned (hundreds of epochs in the
    controller bench's test settings). The long poll is at most half the fetch timeout (and
    half the request timeout); Kafka's defaults keep 500 ms."""
    from kesque.config import BrokerConfig
    from kesque.server.raft_manager import quorum_config

    assert quorum_config(BrokerConfig({})).fetch_max_wait_ms == 500
    fast = BrokerConfig({"controller.quorum.fetch.timeout.ms": "500", "controller.quorum.election.timeout.ms": "250"})
    assert quorum_config(fast).fetch_max_wait_ms == 250
    short_requests = BrokerConfig({"controller.quorum.request.timeout.ms": "400"})
    assert quorum_config(short_requests).fetch_max_wait_ms == 200
