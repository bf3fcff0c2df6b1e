"""``kesque storage`` (kafka-storage.sh) and the start-up checks of meta.properties.

A node's storage is its log dirs and its metadata log dir, each with a meta.properties
(version=1, cluster.id, node.id, directory.id). ``storage format`` writes them; every start checks
they agree, and a node that is not a lone combined one refuses to start unformatted, writing
nothing. The differential test runs Kafka's own StorageTool beside kesque's on twin configs.
"""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

import oracle
from kesque.cli import storage as storage_cli
from kesque.server import bootstrap
from kesque.storage.checkpoint import read_properties
from kesque.testing import kafka as K

CLUSTER_ID = "ir1hlE8vTBephz9AgK0ouQ"


def _config(base, **extra) -> str:
    """A node with two log dirs and a separate metadata dir under ``base``; returns the file."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:9193",
        "listeners": "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": f"{base}/a,{base}/b",
        "metadata.log.dir": f"{base}/m",
        **extra,
    }
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "server.properties")
    with open(path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    return path


def storage(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kesque", "storage", *args], capture_output=True, text=True, timeout=60
    )


def _files(base) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), base) for d, _, fs in os.walk(base) for f in fs)


# ---------------------------------------------------------------------- the tool


def test_random_uuid_is_a_kafka_uuid():
    ids = {storage("random-uuid").stdout.strip() for _ in range(2)}
    assert len(ids) == 2 and all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)


def test_format_writes_meta_properties_in_every_dir(tmp_path):
    cfg = _config(tmp_path)
    r = storage("format", "--cluster-id", CLUSTER_ID, "--config", cfg)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Formatting data directory {tmp_path}/a with metadata.version 4.0-IV3.",
        f"Formatting data directory {tmp_path}/b with metadata.version 4.0-IV3.",
        f"Formatting metadata directory {tmp_path}/m with metadata.version 4.0-IV3.",
    ]
    metas = [read_properties(str(tmp_path / d / "meta.properties")) for d in "abm"]
    for m in metas:
        assert {k: m[k] for k in ("version", "cluster.id", "node.id")} == {
            "version": "1",
            "cluster.id": CLUSTER_ID,
            "node.id": "1",
        }
    assert len({m["directory.id"] for m in metas}) == 3
    # a second format refuses, naming the dir; --ignore-formatted says all is done
    r = storage("format", "-t", CLUSTER_ID, "-c", cfg)
    assert r.returncode == 1 and f"Log directory {tmp_path}/a is already formatted." in r.stderr
    r = storage("format", "-t", CLUSTER_ID, "-c", cfg, "--ignore-formatted")
    assert (r.returncode, r.stdout) == (0, "All of the log directories are already formatted.\n")
    # ... and another cluster id is a mismatch, even with --ignore-formatted
    r = storage("format", "-t", "AAAAAAAAAAAAAAAAAAAAAA", "-c", cfg, "-g")
    assert r.returncode == 1 and "Invalid cluster.id in:" in r.stderr


def test_info_names_what_is_wrong(tmp_path):
    cfg = _config(tmp_path)
    r = storage("info", "-c", cfg)
    assert r.returncode == 1 and f"  {tmp_path}/a does not exist" in r.stdout
    storage("format", "-t", CLUSTER_ID, "-c", cfg)
    r = storage("info", "-c", cfg)
    assert r.returncode == 0 and f"Found metadata: {{cluster.id={CLUSTER_ID}, directory.id=" in r.stdout
    meta = tmp_path / "b" / "meta.properties"
    meta.write_text(meta.read_text().replace(CLUSTER_ID, "AAAAAAAAAAAAAAAAAAAAAA"))
    r = storage("info", "-c", cfg)
    assert r.returncode == 1 and "Mismatched cluster IDs between storage directories." in r.stdout


def test_usage_errors_exit_1():
    for args, message in (
        (["format", "-c", "x"], "kafka-storage: error: argument --cluster-id/-t is required"),
        ([], "kafka-storage: error: too few arguments"),
        (["bogus"], "invalid choice: 'bogus'"),
    ):
        r = storage(*args)
        assert r.returncode == 1 and message in r.stderr, r


# ---------------------------------------------------------------------- start-up checks


def _serve(cfg, *overrides) -> subprocess.CompletedProcess:
    """``kesque serve`` expected to refuse to start."""
    args = [sys.executable, "-m", "kesque", "serve", cfg]
    for o in overrides:
        args += ["--override", o]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


# a broker of a cluster whose controller is another node: Kafka's broker must be formatted first
BROKER_OF_A_CLUSTER = {
    "process.roles": "broker",
    "controller.quorum.voters": "2@127.0.0.1:9193",
    "listeners": "PLAINTEXT://127.0.0.1:0",
}


def test_an_unformatted_node_of_a_cluster_does_not_start(tmp_path):
    cfg = _config(tmp_path, **BROKER_OF_A_CLUSTER)
    before = _files(tmp_path)
    r = _serve(cfg)
    assert r.returncode == 1 and "No readable meta.properties files found." in r.stderr, r
    assert _files(tmp_path) == before  # nothing written
    # one dir formatted, the other not: named
    storage("format", "-t", CLUSTER_ID, "-c", cfg)
    os.unlink(tmp_path / "b" / "meta.properties")
    before = _files(tmp_path)
    r = _serve(cfg)
    assert r.returncode == 1 and f"No `meta.properties` found in {tmp_path}/b" in r.stderr, r
    assert _files(tmp_path) == before


def test_a_cluster_id_mismatch_does_not_start(tmp_path):
    cfg = _config(tmp_path, **{"controller.quorum.voters": "", "listeners": "PLAINTEXT://127.0.0.1:0"})
    storage("format", "-t", CLUSTER_ID, "-c", cfg)
    meta = tmp_path / "m" / "meta.properties"
    meta.write_text(meta.read_text().replace(CLUSTER_ID, "AAAAAAAAAAAAAAAAAAAAAA"))
    before = _files(tmp_path)
    r = _serve(cfg)
    assert r.returncode == 1 and f"Invalid cluster.id in: {tmp_path}/m/meta.properties" in r.stderr, r
    assert _files(tmp_path) == before
    # the same with the cluster.id the file pins
    meta.write_text(meta.read_text().replace("AAAAAAAAAAAAAAAAAAAAAA", CLUSTER_ID))
    r = _serve(cfg, "cluster.id=BBBBBBBBBBBBBBBBBBBBBB")
    assert r.returncode == 1 and "Expected BBBBBBBBBBBBBBBBBBBBBB, but read " + CLUSTER_ID in r.stderr, r
    assert _files(tmp_path) == before


def test_a_formatted_node_starts_with_its_cluster_id(tmp_path):
    from kesque.testing.broker import Broker

    cfg = _config(tmp_path, **BROKER_OF_A_CLUSTER)
    storage("format", "-t", CLUSTER_ID, "-c", cfg)
    with Broker(
        data_dir=str(tmp_path / "a"),
        config={"log.dirs": f"{tmp_path}/a,{tmp_path}/b", "metadata.log.dir": f"{tmp_path}/m"},
    ) as b:
        md = AdminClient({"bootstrap.servers": b.bootstrap_servers}).list_topics(timeout=10)
        assert md.cluster_id == CLUSTER_ID


def test_a_lone_node_formats_every_dir_itself(tmp_path):
    from kesque.testing.broker import Broker

    with Broker(data_dir=str(tmp_path / "a"), config={"metadata.log.dir": f"{tmp_path}/m"}):
        pass
    metas = [read_properties(str(tmp_path / d / "meta.properties")) for d in "am"]
    assert metas[0]["cluster.id"] == metas[1]["cluster.id"] and metas[0]["directory.id"] != metas[1]["directory.id"]


# ---------------------------------------------------------------------- beside Kafka's StorageTool


def _masked(r: subprocess.CompletedProcess, base) -> tuple[int, list[str]]:
    """Exit code and output lines, the dirs and directory ids masked, Kafka's bootstrap-record
    line and stack trace dropped, the lines sorted (Kafka formats dirs in hash order)."""
    text = (r.stdout + r.stderr).replace(str(base), "{dir}")
    text = re.sub(r"directory\.id=[\w-]+", "directory.id={id}", text)
    text = re.sub(r"metadata\.version \S+\.", "metadata.version {v}.", text)
    text = re.sub(r"\{dir}/\w is already formatted", "{dir}/? is already formatted", text)  # which first: hash order
    text = re.sub(r"^Exception in thread \"main\" java\.lang\.RuntimeException: ", "", text)
    lines = [line for line in text.splitlines() if not line.startswith(("Bootstrap metadata:", "\tat ", "usage:", " "))]
    return r.returncode, sorted(lines)


@pytest.mark.oracle
@pytest.mark.skipif(oracle.REASON is not None, reason=oracle.REASON or "")
def test_storage_tool_beside_kafkas(tmp_path):
    sides = {"kafka": lambda *a: K.run_tool("kafka-storage.sh", *a), "kesque": storage}
    cfgs = {side: _config(tmp_path / side) for side in sides}
    steps = [
        ("info", "-c", "{cfg}"),
        ("format", "-c", "{cfg}"),
        ("format", "-t", CLUSTER_ID, "-c", "{cfg}"),
        ("info", "-c", "{cfg}"),
        ("format", "-t", CLUSTER_ID, "-c", "{cfg}"),
        ("format", "-t", CLUSTER_ID, "-c", "{cfg}", "--ignore-formatted"),
        ("format", "-t", CLUSTER_ID, "-c", "{cfg}", "--standalone"),
        "another cluster id in b",
        ("info", "-c", "{cfg}"),
        ("format", "-t", CLUSTER_ID, "-c", "{cfg}", "--ignore-formatted"),
        "b unformatted",
        ("info", "-c", "{cfg}"),
    ]
    for step in steps:
        if isinstance(step, str):  # the same change to both sides' files
            for side in sides:
                meta = tmp_path / side / "b" / "meta.properties"
                if step == "b unformatted":
                    meta.unlink()
                else:
                    meta.write_text(meta.read_text().replace(CLUSTER_ID, "AAAAAAAAAAAAAAAAAAAAAA"))
            continue
        got = {}
        for side, run in sides.items():
            got[side] = _masked(run(*[a.replace("{cfg}", cfgs[side]) for a in step]), tmp_path / side)
        assert got["kesque"] == got["kafka"], step
    metas = {side: [f for f in _files(tmp_path / side) if f.endswith("meta.properties")] for side in sides}
    assert metas["kesque"] == metas["kafka"] == ["a/meta.properties", "m/meta.properties"]  # b's removed
    for side in sides:  # the same keys (Kafka writes the metadata dir's bootstrap checkpoint too)
        for f in metas[side]:
            assert sorted(read_properties(str(tmp_path / side / f))) == [
                "cluster.id",
                "directory.id",
                "node.id",
                "version",
            ]


def test_format_refuses_a_feature_level_it_would_not_use(tmp_path):
    """``--feature``: the levels kesque finalizes are accepted; another level is refused naming the
    feature (formatting would otherwise give a cluster at kesque's level, e.g. transaction.version 2
    where 1 was asked); a name Kafka does not know gets Kafka's message; a Kafka feature kesque
    does not finalize is named on stderr. Nothing is written when refused."""
    cfg = _config(tmp_path)
    for feature, fragment in (
        (
            "transaction.version=1",
            "--feature transaction.version=1: kesque formats a new cluster with transaction.version 2 only",
        ),
        ("metadata.version=33", "metadata.version 25 only"),
        (
            "bogus.version=1",
            "Unsupported feature: bogus.version. Supported features are: "
            "eligible.leader.replicas.version, group.version",
        ),
        ("transaction.version", "expected NAME=LEVEL"),
    ):
        r = storage("format", "--cluster-id", CLUSTER_ID, "--config", cfg, "--feature", feature)
        assert r.returncode == 1 and fragment in r.stderr, (feature, r)
        assert _files(tmp_path) == ["server.properties"], feature
    r = storage(
        "format",
        "--cluster-id",
        CLUSTER_ID,
        "--config",
        cfg,
        "--feature",
        "transaction.version=2",
        "--feature",
        "eligible.leader.replicas.version=1",
        "--feature",
        "group.version=1",
    )
    assert r.returncode == 0, r
    assert "--feature group.version=1 is not used: kesque does not finalize group.version" in r.stderr
    assert "meta.properties" in " ".join(_files(tmp_path))


# ---------------------------------------------------------------------- bootstrap.checkpoint I/O errors
ADD_SCRAM = "SCRAM-SHA-256=[name=alice,iterations=4096,password=alice-secret]"


class _HalfWritten(io.BufferedWriter):
    """A file whose write stores half the bytes, then fails as a full disk does."""

    def write(self, data):
        super().write(bytes(data)[: len(data) // 2])
        self.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_at(monkeypatch, point: str) -> None:
    """Make bootstrap.write's ``point`` (write, fsync or rename) fail."""
    if point == "write":

        def opener(path, mode="r", *a, **kw):
            f = open(path, mode, *a, **kw)  # noqa: SIM115 - handed back to the caller's with
            if str(path).endswith(".tmp") and "w" in mode:
                raw = f.detach()
                return _HalfWritten(raw)
            return f

        monkeypatch.setattr(bootstrap, "open", opener, raising=False)
    elif point == "fsync":
        real_fsync = os.fsync

        def fsync(fd):
            if os.readlink(f"/proc/self/fd/{fd}").endswith("bootstrap.checkpoint.tmp"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
    else:
        real_replace = os.replace

        def replace(src, dst):
            if str(dst).endswith("bootstrap.checkpoint"):
                raise OSError(errno.EACCES, os.strerror(errno.EACCES))
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize(
    "point,cause",
    [("write", "No space left on device"), ("fsync", "Input/output error"), ("rename", "Permission denied")],
)
def test_format_add_scram_when_the_bootstrap_file_cannot_be_written(tmp_path, monkeypatch, capsys, point, cause):
    cfg = _config(tmp_path)
    with monkeypatch.context() as m:
        _fail_at(m, point)
        code = storage_cli.main(["format", "-t", CLUSTER_ID, "-c", cfg, "--add-scram", ADD_SCRAM])
    err = capsys.readouterr().err
    path = tmp_path / "m" / "bootstrap.checkpoint"
    assert code == 1 and err == f"Error while writing bootstrap.checkpoint file {path}: {cause}\n", err
    # no partial file, and the metadata dir is left unformatted (its meta.properties comes after)
    assert sorted(os.listdir(tmp_path / "m")) == []
    # once the disk is fine again, the format finishes with the first user
    assert storage_cli.main(["format", "-t", CLUSTER_ID, "-c", cfg, "--add-scram", ADD_SCRAM, "-g"]) == 0
    assert sorted(os.listdir(tmp_path / "m")) == ["bootstrap.checkpoint", "meta.properties"]
    users = [r for r in bootstrap.read(str(tmp_path / "m")) if r["type"] == "UserScramCredentialRecord"]
    assert [(u["name"], u["iterations"]) for u in users] == [("alice", 4096)]


@pytest.mark.parametrize("point", ["write", "fsync", "rename"])
def test_a_failed_bootstrap_write_leaves_the_file_it_replaces(tmp_path, monkeypatch, point):
    first = [{"type": "FeatureLevelRecord", "name": "metadata.version", "feature_level": 25}]
    path = bootstrap.write(str(tmp_path), first)
    before = open(path, "rb").read()
    with monkeypatch.context() as m:
        _fail_at(m, point)
        with pytest.raises(bootstrap.BootstrapWriteError, match=re.escape(path)):
            bootstrap.write(str(tmp_path), first * 2)
    assert open(path, "rb").read() == before and os.listdir(tmp_path) == ["bootstrap.checkpoint"]
