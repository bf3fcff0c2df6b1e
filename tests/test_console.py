"""The web console (issue 29, docs/console.md): its pages over a real in-process broker
started with ``console.listener``, through real HTTP and through :meth:`Console.handle`;
every kind of bad input answered with a message or a 4xx and the broker unaffected; values
from the cluster HTML-escaped; write actions hidden where the cluster's ACLs refuse them."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from acl_wire import acl, create_acls
from kesque.cli.console import main as console_main
from kesque.client.producer import Producer
from kesque.client.share_consumer import ShareConsumer
from kesque.client.wire import Connection, make
from kesque.config.broker import STANDARD_AUTHORIZER, BrokerConfig
from kesque.config.types import ConfigError
from kesque.console import admin as A
from kesque.console.app import Console, decode_input
from kesque.console.endpoint import ConsoleServer
from kesque.protocol.api_keys import ApiKeys
from kesque.testing.broker import Broker
from kesque.testing.cluster import Cluster
from wire import Api, WireClient

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    b = Broker(
        data_dir=str(tmp_path_factory.mktemp("console") / "d"),
        mode="thread",
        config={"console.listener": "http://127.0.0.1:0", "group.share.enable": "true"},
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def console(node):
    """A console of ``node`` called in-process (the HTTP server's own one answers only its Host)."""
    c = Console(A.ConsoleAdmin(node.bootstrap_servers))
    yield c
    c.admin.close()


def request(node, method: str, target: str, body: bytes | None = None, headers: dict | None = None):
    port = node._server.console.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        hdrs = {"Host": f"127.0.0.1:{port}", **(headers or {})}
        conn.request(method, target, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def post(console: Console, target: str, **form):
    form.setdefault("csrf", console.csrf)
    return console.handle("POST", target, {}, urllib.parse.urlencode(form).encode())


def get(console: Console, target: str):
    r = console.handle("GET", target)
    return r.status, r.body.decode()


def error_of(page: str) -> str:
    m = re.search(r'<div class="error" id="error">(.*?)</div>', page)
    return m.group(1) if m else ""


def test_console_listener_is_checked_like_metrics_listener():
    assert BrokerConfig({"console.listener": "http://127.0.0.1:8080"}).get("console.listener")
    with pytest.raises(ConfigError, match="console.listener"):
        BrokerConfig({"console.listener": "127.0.0.1:8080"})


def test_a_console_listener_without_a_host_binds_the_loopback(node):
    endpoint = ConsoleServer("", 0, node.bootstrap_servers)
    endpoint.start()
    try:
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/"
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5):
            pass
    finally:
        endpoint.stop()


def test_a_busy_console_port_stops_the_start_naming_the_key(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        b = Broker(
            data_dir=str(tmp_path / "d"), config={"console.listener": f"http://127.0.0.1:{port}"}
        )  # `kesque serve`
        try:
            with pytest.raises(Exception) as e:
                b.start(60)
        finally:
            b.close()
    assert "Unable to listen on" in str(e.value) and "console.listener" in str(e.value)


def test_a_cluster_that_does_not_answer_is_a_502_naming_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    c = Console(A.ConsoleAdmin(f"127.0.0.1:{port}", timeout=2))
    for target in ("/", "/topics/t/messages", "/groups", "/overview", "/api/stats"):
        r = c.handle("GET", target)
        message = json.loads(r.body)["error"] if target.startswith("/api/") else error_of(r.body.decode())
        assert r.status == 502 and message.startswith(f"the cluster at 127.0.0.1:{port} did not answer"), target


def test_first_page_lists_topics_over_http_and_assets_come_from_the_package(node):
    with WireClient(node.bootstrap_servers) as w:
        Api(w).create_topic("first-page", 2)
    status, headers, body = request(node, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert '<a href="/topics/first-page">first-page</a>' in body.decode()
    assert "default-src 'self'" in headers["Content-Security-Policy"]  # nothing from elsewhere
    assert not re.search(r'(href|src)="(?!/)', body.decode())  # every link and asset on the console itself
    for asset, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        status, headers, body = request(node, "GET", f"/static/{asset}")
        assert status == 200 and headers["Content-Type"].startswith(kind) and len(body) > 500


def test_topic_lifecycle_produce_browse_and_escaping(console):
    r = post(console, "/topics", name="pages", partitions="3", replication_factor="1", configs="retention.ms=3600000")
    assert r.status == 303 and r.headers["Location"].startswith("/topics/pages?note=")
    status, page = get(console, "/topics/pages")
    assert status == 200 and page.count("<tr><td>") >= 3
    assert "<td>retention.ms</td><td>3600000</td><td>DYNAMIC_TOPIC_CONFIG</td>" in page
    sizes = [p["size"] for p in json.loads(console.handle("GET", "/api/topics/pages").body)["partitions"]]
    assert sizes == [0, 0, 0]  # DescribeLogDirs of each partition: empty logs
    assert 'action="/topics/pages/delete"' in page and 'action="/topics/pages/config"' in page

    r = post(console, "/topics/pages/produce", partition="1", key="<k>", value=SCRIPT, headers="<h>=<v>")
    assert r.status == 303, r.body
    assert "partition=1&offset=0" in r.headers["Location"]
    post(console, "/topics/pages/produce", partition="1", value="aGVsbG8=", encoding="base64")
    post(console, "/topics/pages/produce", partition="1", value="ff00", encoding="hex")
    status, page = get(console, "/topics/pages/messages?partition=1&offset=0")
    assert status == 200
    assert SCRIPT not in page and "<k>" not in page and "<h>" not in page
    assert '<td class="value">&lt;script&gt;alert(1)&lt;/script&gt;</td>' in page
    assert '<td class="key">&lt;k&gt;</td>' in page and "&lt;h&gt;: &lt;v&gt;" in page
    assert '<td class="value">hello</td>' in page
    assert 'title="not UTF-8: hex">ff00</span>' in page  # binary shown as hex
    # the same records as JSON; a search; a timestamp
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&offset=0").body)
    assert [r["value"] for r in data["records"]] == [SCRIPT, "hello", {"base64": "/wA="}]
    assert data["records"][0]["headers"] == [["<h>", "<v>"]]
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&offset=0&q=ell").body)
    assert [r["offset"] for r in data["records"]] == [1]
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&timestamp=0").body)
    assert [r["offset"] for r in data["records"]] == [0, 1, 2]
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&timestamp=2000-01-01T00:00").body)
    assert [r["offset"] for r in data["records"]] == [0, 1, 2]
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&timestamp=2999-01-01T00:00Z").body)
    assert data["records"] == []  # nothing at or after it: the end
    status, page = get(console, "/topics/pages/messages?partition=1&offset=0&limit=2")
    assert '<a id="next" href="/topics/pages/messages?limit=2&amp;partition=1&amp;offset=2">' in page
    assert 'id="next"' not in get(console, "/topics/pages/messages?partition=1&offset=1&limit=2")[1]  # the end
    data = json.loads(console.handle("GET", "/api/topics/pages/messages?partition=1&limit=1").body)
    assert [r["offset"] for r in data["records"]] == [2]  # no offset: the last ones

    r = post(console, "/topics/pages/config", key="retention.ms", value="7200000")
    assert r.status == 303
    assert "<td>retention.ms</td><td>7200000</td>" in get(console, "/topics/pages")[1]
    r = post(console, "/topics/pages/config", key="no.such.config", value="1")
    assert r.status == 409 and "INVALID_CONFIG" in error_of(r.body.decode())
    r = post(console, "/topics/pages/delete")
    assert r.status == 303
    deadline = time.monotonic() + 10
    while get(console, "/topics/pages")[0] != 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert get(console, "/topics/pages")[0] == 404


def test_bad_input_gets_a_message_or_a_4xx_and_the_broker_is_unaffected(node, console):
    post(console, "/topics", name="bad-input", partitions="1", replication_factor="1")
    post(console, "/topics/bad-input/produce", value="one")
    cases = {
        "/topics/bad-input/messages?partition=0&offset=-5": (416, "offset must be at least 0, not -5."),
        "/topics/bad-input/messages?partition=0&offset=7": (
            416,
            "Offset 7 is out of range for bad-input-0: its records are at offsets 0 to 0.",
        ),
        "/topics/bad-input/messages?partition=9": (404, "Topic bad-input has no partition 9 (partitions: 0-0)."),
        "/topics/bad-input/messages?partition=x": (400, "partition must be an integer, not &#x27;x&#x27;."),
        "/topics/bad-input/messages?limit=100000": (400, "limit must be at most 500, not 100000."),
        "/topics/bad-input/messages?timestamp=yesterday": (
            400,
            "timestamp must be milliseconds since the epoch or an ISO 8601 time (2026-01-31T12:00:00Z), "
            "not &#x27;yesterday&#x27;.",
        ),
        "/topics/no-such-topic": (404, "Topic no-such-topic does not exist."),
        "/topics/no-such-topic/messages": (404, "Topic no-such-topic does not exist."),
        "/groups/no-such-group": (404, "Consumer group no-such-group does not exist."),
        "/nowhere": (404, "No page at /nowhere."),
        "/static/../app.py": (404, "No asset ../app.py."),
        "/api/nothing": (404, "No such API."),
        "/?" + "a=1&" * 2000: (414, "Request target longer than 4096 bytes."),
        "/?" + "&".join(f"f{i}=1" for i in range(100)): (400, "More than 64 parameters."),
        "/?q=%C3%28": (400, "The parameters are not UTF-8."),
        "/topics/%ff": (400, "The request path is not UTF-8."),
    }
    for target, (status, message) in cases.items():
        r = console.handle("GET", target)
        got = json.loads(r.body)["error"] if target.startswith("/api/") else error_of(r.body.decode())
        assert (r.status, got) == (status, message), target
    # produce forms with bytes that are not what they claim
    for enc, value, message in (
        ("base64", "!!!", "The value is not valid base64."),
        ("hex", "abc", "The value is not valid hex (two digits per byte)."),
        ("rot13", "x", "Unknown encoding &#x27;rot13&#x27;: text, base64 or hex."),
    ):
        r = post(console, "/topics/bad-input/produce", value=value, encoding=enc)
        assert (r.status, error_of(r.body.decode())) == (400, message)
    r = post(console, "/topics/bad-input/produce", value="x", partition="4")
    assert (r.status, error_of(r.body.decode())) == (404, "Topic bad-input has no partition 4 (partitions: 0-0).")
    r = post(console, "/topics/bad-input/produce", value="x", csrf="forged")
    assert r.status == 403
    assert console.handle("PUT", "/").status == 405
    r = post(console, "/topics", name="bad input!", partitions="1")
    assert r.status == 409 and "INVALID_TOPIC_EXCEPTION" in error_of(r.body.decode())
    # malformed HTTP, on the socket
    port = node._server.console.port
    for raw, status in (
        (b"GET / HTTP/1.x\r\n\r\n", 400),
        (b"BREW / HTTP/1.1\r\n\r\n", 501),
        (b"GET /" + b"x" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port, 411),
        (b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 99999999\r\n\r\n" % port, 413),
        (b"GET / HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n" % port, 421),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            answer = s.recv(200)
        # the standard library's refusal: a status line, or (a request line it could not read as
        # HTTP/1.x) its error page alone, as it answers HTTP/0.9
        got = int(answer.split()[1]) if answer.startswith(b"HTTP/1.") else int(re.search(rb"code: (\d+)", answer)[1])
        assert got == status, (raw[:40], answer)
    # and the broker served on: the record is still there
    data = json.loads(console.handle("GET", "/api/topics/bad-input/messages?partition=0&offset=0").body)
    assert [r["value"] for r in data["records"]] == ["one"]


def test_group_lag_and_reset_offsets(node, console):
    post(console, "/topics", name="lagging", partitions="2", replication_factor="1")
    for i in range(4):
        post(console, "/topics/lagging/produce", value=f"v{i}", partition=str(i % 2))
    gid = "<g>&group"
    c = Consumer(
        {
            "bootstrap.servers": node.bootstrap_servers,
            "group.id": gid,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe(["lagging"])
        got, deadline = 0, time.monotonic() + 20
        while got < 4 and time.monotonic() < deadline:
            m = c.poll(0.5)
            got += m is not None and m.error() is None
        c.commit(asynchronous=False)
        status, page = get(console, "/groups/" + urllib.parse.quote(gid, safe=""))
        assert status == 200 and 'total lag <b id="total-lag">0</b>' in page
        assert "Offsets can be reset once the group has no members." in page
    finally:
        c.close()
    status, page = get(console, "/groups")
    assert f'<a href="/groups/%3Cg%3E%26group">{"&lt;g&gt;&amp;group"}</a>' in page and "<g>" not in page
    r = post(console, "/groups/%3Cg%3E%26group/reset", to="earliest")
    assert r.status == 303, r.body
    g = json.loads(console.handle("GET", "/api/groups/%3Cg%3E%26group").body)
    assert (g["lag"], [(p["partition"], p["committed"], p["lag"]) for p in g["partitions"]]) == (
        4,
        [(0, 0, 2), (1, 0, 2)],
    )
    r = post(console, "/groups/%3Cg%3E%26group/reset", to="offset", offset="1")
    assert r.status == 303
    assert json.loads(console.handle("GET", "/api/groups/%3Cg%3E%26group").body)["lag"] == 2
    stats = json.loads(console.handle("GET", "/api/stats").body)  # what the charts draw
    assert stats["lag"]["<g>&group"] == 2 and stats["end_offsets"]["lagging"] == 4
    r = post(console, "/groups/%3Cg%3E%26group/reset", to="sideways")
    assert (r.status, error_of(r.body.decode())) == (400, "Reset to earliest, latest or an offset.")


def test_share_group_members_and_assignment(node, console):
    post(console, "/topics", name="shared", partitions="1", replication_factor="1")
    sc = ShareConsumer(node.bootstrap_servers, "<share>")
    try:
        sc.subscribe(["shared"])
        deadline = time.monotonic() + 20
        while not sc.assignment and time.monotonic() < deadline:
            sc.poll(0.2)
        status, page = get(console, "/share-groups")
        assert status == 200 and '<a href="/share-groups/%3Cshare%3E">&lt;share&gt;</a>' in page
        g = json.loads(console.handle("GET", "/api/share-groups/%3Cshare%3E").body)
        assert g["state"] == "Stable" and [m["assignment"] for m in g["members"]] == [[["shared", 0]]]
        status, page = get(console, "/share-groups/%3Cshare%3E")
        assert status == 200 and "<td>shared-0</td>" in page
    finally:
        sc.close()
    assert console.handle("GET", "/share-groups/none").status == 404


def test_overview_transactions_share_groups_quotas_and_charts(node, console):
    o = json.loads(console.handle("GET", "/api/overview").body)
    assert [b["id"] for b in o["brokers"]] == [1] and o["controller_id"] == 1
    assert o["quorum"]["leader_id"] == 1 and o["under_replicated"] == [] and o["offline"] == []
    for page in ("/overview", "/transactions", "/share-groups", "/quotas", "/charts"):
        status, body = get(console, page)
        assert status == 200 and not error_of(body), page

    # a quota set for a user and the default client id, as kafka-configs.sh --alter --add-config sets it
    def build(mod, v):
        rq = mod.request
        return make(
            rq.AlterClientQuotasRequest,
            entries=tuple(
                make(
                    rq.EntryData,
                    entity=tuple(make(rq.EntityData, entity_type=t, entity_name=n) for t, n in entity),
                    ops=(make(rq.OpData, key="producer_byte_rate", value=rate, remove=False),),
                )
                for entity, rate in (((("user", "<alice>"),), 1024.0), ((("client-id", None),), 2048.0))
            ),
            validate_only=False,
        )

    with Connection.to_any(node.bootstrap_servers) as conn:
        resp = conn.request(ApiKeys.ALTER_CLIENT_QUOTAS, build)
    assert [int(e.error_code) for e in resp.entries] == [0, 0]
    status, page = get(console, "/quotas")
    assert "<td>user=&lt;alice&gt;</td><td>producer_byte_rate=1024</td>" in page
    assert "<td>client-id=&lt;default&gt;</td><td>producer_byte_rate=2048</td>" in page
    stats = json.loads(console.handle("GET", "/api/stats").body)
    assert stats["time_ms"] > 0 and isinstance(stats["end_offsets"], dict) and isinstance(stats["lag"], dict)


def test_transactions_listed_and_an_open_one_aborted_from_the_page(node, console):
    post(console, "/topics", name="txn", partitions="1", replication_factor="1")
    p = Producer(node.bootstrap_servers, transactional_id="console-txn")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("txn", b"in flight", partition=0)
        p.flush()
        t = json.loads(console.handle("GET", "/api/transactions").body)
        (mine,) = [x for x in t["transactions"] if x["transactional_id"] == "console-txn"]
        assert (mine["state"], mine["partitions"]) == ("Ongoing", [["txn", 0]])
        (open_,) = [o for o in t["open"] if o["topic"] == "txn"]
        assert (open_["start_offset"], open_["hanging"]) == (0, False)
        status, page = get(console, "/transactions")
        assert status == 200 and 'action="/transactions/abort"' in page and "console-txn" in page
        r = post(console, "/transactions/abort", topic="txn", partition="0", start_offset="0")
        assert r.status == 303, r.body
        t = json.loads(console.handle("GET", "/api/transactions").body)
        assert [o for o in t["open"] if o["topic"] == "txn"] == []
        r = post(console, "/transactions/abort", topic="txn", partition="0", start_offset="0")
        assert r.status == 404 and "No open transaction on txn-0 starts at offset 0" in error_of(r.body.decode())
    finally:
        p.close()


def test_write_actions_hidden_where_the_cluster_refuses_them(tmp_path):
    """A principal that may only describe and read: no create, delete, alter, produce or abort
    form anywhere, and a forged post is refused by the cluster with a message."""
    cfg = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with Broker(data_dir=str(tmp_path / "d"), mode="thread", config=cfg).start() as b:
        with WireClient(b.bootstrap_servers) as w:
            Api(w).create_topic("ro", 1)
            r = create_acls(
                w,
                [
                    # not DESCRIBE: DescribeCluster answers the cluster's authorized operations as 0
                    acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
                    acl("TOPIC", "*", "DESCRIBE"),
                    acl("TOPIC", "*", "READ"),
                    acl("TOPIC", "*", "DESCRIBE_CONFIGS"),
                ],
            )
            assert [x.error_code for x in r.results] == [0] * 4
        console = Console(A.ConsoleAdmin(b.bootstrap_servers))
        try:
            pages = {p: get(console, p) for p in ("/", "/topics/ro", "/topics/ro/messages", "/transactions")}
            assert all(status == 200 for status, _ in pages.values()), pages
            assert all('method="post"' not in body for _, body in pages.values())
            r = post(console, "/topics/ro/delete")
            assert (r.status, error_of(r.body.decode())) == (
                403,
                "Deleting topic ro: TOPIC_AUTHORIZATION_FAILED (Topic authorization failed.)",
            )
            r = post(console, "/topics", name="new", partitions="1")
            assert r.status == 403
            assert json.loads(console.handle("GET", "/api/overview").body)["ops"] == 0
        finally:
            console.admin.close()


def test_decode_input_and_allowed():
    assert decode_input("aGk=", "base64", "value") == b"hi"
    assert decode_input("6869", "hex", "value") == b"hi"
    assert decode_input("hé", "text", "value") == "hé".encode()
    assert A.allowed(1 << A.WRITE, A.WRITE) and not A.allowed(1 << A.READ, A.WRITE)
    assert not A.allowed(A.OPS_NOT_ASKED, A.WRITE)  # not told: not shown


def test_kesque_console_command_serves_a_cluster(node, capsys):
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kesque",
            "console",
            "--bootstrap-server",
            node.bootstrap_servers,
            "--listen",
            "http://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = p.stdout.readline()
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
        assert m, line
        conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=30)
        conn.request("GET", "/")
        r = conn.getresponse()
        assert r.status == 200 and b'<table id="topics">' in r.read()
        conn.close()
    finally:
        p.terminate()
        assert p.wait(10) == 0
    assert console_main(["--bootstrap-server", "x:1", "--listen", "127.0.0.1:80"]) == 2
    assert "expected http://host:port" in capsys.readouterr().err


@pytest.mark.slow
def test_overview_shows_a_stopped_followers_partition_under_replicated(tmp_path):
    """Three nodes; a follower SIGSTOPped: the overview and the topic pages show the partition
    under-replicated (the ISR without it), and healthy again after SIGCONT (make slow: 3 processes)."""
    config = {
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "600",
        "controller.quorum.request.timeout.ms": "500",
        "broker.heartbeat.interval.ms": "300",
        "broker.session.timeout.ms": "8000",
        "replica.lag.time.max.ms": "1500",
        "replica.fetch.backoff.ms": "200",
    }
    c = Cluster(nodes=3, data_dir=str(tmp_path), config=config, host="127.0.0.1")
    with c:
        console = Console(A.ConsoleAdmin(c.node(1).bootstrap_servers))
        try:
            admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
            admin.create_topics([NewTopic("urp", 1, replica_assignment=[[1, 2, 3]])])["urp"].result(20)  # leader 1

            def overview():
                return json.loads(console.handle("GET", "/api/overview").body)

            until = lambda pred, what: _wait(pred, 30, what)  # noqa: E731
            until(
                lambda: json.loads(console.handle("GET", "/api/topics/urp").body)["partitions"][0]["isr"] == [1, 2, 3],
                "an ISR of 3",
            )
            o = overview()
            assert [b["id"] for b in o["brokers"]] == [1, 2, 3] and o["under_replicated"] == []
            assert sorted(r["id"] for r in o["quorum"]["replicas"] if r["voter"]) == [1, 2, 3]
            follower = 3 if o["quorum"]["leader_id"] != 3 else 2  # not the active controller
            c.node(follower).process.send_signal(signal.SIGSTOP)
            try:
                post(console, "/topics/urp/produce", value="while stopped", partition="0")
                until(lambda: overview()["under_replicated"] == ["urp-0"], "urp-0 under-replicated")
                status, page = get(console, "/overview")
                assert "Under-replicated: 1 · offline: 0" in page and "under-replicated: urp-0" in page
                status, page = get(console, "/")
                assert '<td class="warn">1</td>' in page
            finally:
                c.node(follower).process.send_signal(signal.SIGCONT)
            until(lambda: overview()["under_replicated"] == [], "the follower back in the ISR")
        finally:
            console.admin.close()
            for b in c.nodes.values():  # the last node's controlled shutdown would wait for a lost quorum
                if b.process is not None:
                    b.kill()


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
