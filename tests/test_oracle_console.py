"""The web console against Apache Kafka 4.4 and against kesque (issue 29, test 3): the same
steps through the console's forms on each (create a topic, produce records, a classic and a
KIP-848 group consume and commit, an offset reset), then the data its pages render (the
``/api/...`` JSON each page is drawn from) compared: the same topics, partitions, offsets,
records, groups and lag.

Kafka's JVM start makes this longer than the default suite's budget: markers ``oracle`` and
``slow``, run by ``make oracle``."""

from __future__ import annotations

import json
import time
import urllib.parse

import pytest
from confluent_kafka import Consumer

import oracle
from kesque.console.admin import ConsoleAdmin
from kesque.console.app import Console

pytestmark = [*oracle.MARKS, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with oracle.brokers(tmp_path_factory) as both:
        yield both


def api(console: Console, target: str):
    r = console.handle("GET", target)
    assert r.status == 200, (target, r.body[:500])
    return json.loads(r.body)


def post(console: Console, target: str, **form):
    r = console.handle("POST", target, {}, urllib.parse.urlencode({"csrf": console.csrf, **form}).encode())
    assert r.status == 303, (target, r.body[-800:])


def scenario(bootstrap: str) -> dict:
    """The steps, through the console; what its pages then show."""
    console = Console(ConsoleAdmin(bootstrap))
    try:
        post(console, "/topics", name="shown", partitions="2", replication_factor="1", configs="retention.ms=3600000")
        for i in range(5):
            post(
                console,
                "/topics/shown/produce",
                partition=str(i % 2),
                key=f"k{i}",
                value=f"<v{i}>",
                headers=f"h=x{i}",
            )
        for group, protocol, wanted in (("classic-g", "classic", 5), ("kip848-g", "consumer", 5)):
            conf = {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "group.protocol": protocol,
            }
            c = Consumer(conf)
            try:
                c.subscribe(["shown"])
                got, deadline = 0, time.monotonic() + 60
                while got < wanted and time.monotonic() < deadline:
                    m = c.poll(0.5)
                    got += m is not None and m.error() is None
                assert got == wanted, (group, got)
                c.commit(asynchronous=False)
                live = api(console, f"/api/groups/{group}")
            finally:
                c.close()
            assert live["lag"] == 0 and len(live["members"]) == 1
        deadline = time.monotonic() + 30
        while api(console, "/api/groups/classic-g")["members"] and time.monotonic() < deadline:
            time.sleep(0.2)
        post(console, "/groups/classic-g/reset", to="offset", offset="1")
        topics = [t for t in api(console, "/api/topics") if not t["internal"]]
        topic = api(console, "/api/topics/shown")
        for p in topic["partitions"]:
            assert p["size"] > 0
            del p["size"]  # bytes on disk: the same batches, but not a figure to hold two brokers to
        configs = {c["name"]: (c["value"], c["source"]) for c in topic["configs"]}
        groups = {g["group_id"]: g for g in api(console, "/api/groups")}
        return {
            "topics": topics,
            "partitions": topic["partitions"],
            "retention.ms": configs["retention.ms"],
            "cleanup.policy": configs["cleanup.policy"],
            "records": [api(console, f"/api/topics/shown/messages?partition={p}&offset=0")["records"] for p in (0, 1)],
            "groups": {g: (groups[g]["state"], groups[g]["type"]) for g in ("classic-g", "kip848-g")},
            "lag": {
                g: [
                    (x["topic"], x["partition"], x["committed"], x["end_offset"], x["lag"])
                    for x in api(console, f"/api/groups/{g}")["partitions"]
                ]
                for g in ("classic-g", "kip848-g")
            },
            "overview": {
                k: v
                for k, v in api(console, "/api/overview").items()
                if k in ("controller_id", "under_replicated", "offline")
            },
        }
    finally:
        console.admin.close()


def _strip_times(records):
    return [[{k: v for k, v in r.items() if k != "timestamp"} for r in part] for part in records]


def test_the_console_shows_the_same_on_kafka_and_kesque(pair):
    kafka = scenario(pair["kafka"].bootstrap_servers)
    kesque = scenario(pair["kesque"].bootstrap_servers)
    kafka["records"], kesque["records"] = _strip_times(kafka["records"]), _strip_times(kesque["records"])
    assert kesque == kafka
    # and what that is
    assert kafka["lag"]["classic-g"] == [("shown", 0, 1, 3, 2), ("shown", 1, 1, 2, 1)]
    assert kafka["lag"]["kip848-g"] == [("shown", 0, 3, 3, 0), ("shown", 1, 2, 2, 0)]
    assert kafka["groups"] == {"classic-g": ("Empty", "classic"), "kip848-g": ("Empty", "consumer")}
    assert [r["value"] for r in kafka["records"][0]] == ["<v0>", "<v2>", "<v4>"]
