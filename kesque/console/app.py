"""The console's routes and pages: :meth:`Console.handle` turns one HTTP request (method,
target, headers, body) into a :class:`Response`, with no socket in sight, so the pages and
every kind of bad input are tested in-process (tests/test_console.py).

Pages are HTML written here with :func:`html.escape` on everything that comes from the
cluster or the request (topic names, keys, values, headers, configs, error messages). Each
page's data is also served as JSON at ``/api/...`` (what the live charts poll, and what the
comparison against Apache Kafka reads). Write actions (forms) are shown only when the cluster's
authorized operations grant them, and every form carries the console's CSRF token.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import html
import json
import secrets
import time
import urllib.parse
from dataclasses import dataclass, field
from importlib import resources

from . import admin as A
from .admin import ConsoleAdmin, ConsoleError, allowed

MAX_TARGET = 4096  # bytes of path and query string; longer: 414
MAX_BODY = 1 << 20  # bytes of a form; larger: 413
MAX_FIELDS = 64
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}

NAV = [
    ("/", "Topics"),
    ("/groups", "Consumer groups"),
    ("/share-groups", "Share groups"),
    ("/overview", "Overview"),
    ("/transactions", "Transactions"),
    ("/quotas", "Quotas"),
    ("/charts", "Charts"),
]


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status
        self.message = message


def h(v) -> str:
    """HTML-escaped text of anything (None: empty)."""
    return "" if v is None else html.escape(str(v), quote=True)


def show_bytes(b: bytes | None) -> str:
    """A key, value or header value as the page shows it: UTF-8 text, else hex, escaped."""
    if b is None:
        return '<span class="null">null</span>'
    try:
        return h(b.decode("utf-8"))
    except UnicodeDecodeError:
        return f'<span class="hex" title="not UTF-8: hex">{h(b.hex())}</span>'


def json_bytes(b: bytes | None):
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def _json_default(o):
    if isinstance(o, bytes | bytearray):
        return json_bytes(bytes(o))
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(type(o).__name__)


def decode_input(text: str, encoding: str, what: str) -> bytes:
    """A form's key or value in its encoding (text, base64 or hex), or a clear 400."""
    if encoding == "text":
        return text.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"The {what} is not valid base64.") from None
    if encoding == "hex":
        try:
            return bytes.fromhex(text.strip())
        except ValueError:
            raise BadRequest(f"The {what} is not valid hex (two digits per byte).") from None
    raise BadRequest(f"Unknown encoding {encoding!r}: text, base64 or hex.")


def _int(params: dict, name: str, default: int | None = None, lo: int | None = None, hi: int | None = None):
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {raw!r}.") from None
    if lo is not None and v < lo:
        raise BadRequest(f"{name} must be at least {lo}, not {v}.")
    if hi is not None and v > hi:
        raise BadRequest(f"{name} must be at most {hi}, not {v}.")
    return v


def _timestamp(raw: str) -> int | None:
    """The browser's timestamp: milliseconds since the epoch, or an ISO 8601 time (UTC unless it
    names its zone), e.g. ``2026-12-06T15:00:00Z``."""
    if not raw:
        return None
    if raw.isdigit():
        return int(raw)
    try:
        t = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(
            f"timestamp must be milliseconds since the epoch or an ISO 8601 time (2026-01-31T12:00:00Z), not {raw!r}."
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return max(int(t.timestamp() * 1000), 0)


def _parse_params(raw: str) -> dict[str, str]:
    if raw.count("&") + raw.count(";") >= MAX_FIELDS:
        raise BadRequest(f"More than {MAX_FIELDS} parameters.")
    try:
        pairs = urllib.parse.parse_qsl(
            raw, keep_blank_values=True, strict_parsing=False, errors="strict", max_num_fields=MAX_FIELDS
        )
    except UnicodeDecodeError:
        raise BadRequest("The parameters are not UTF-8.") from None
    except ValueError as e:
        raise BadRequest(f"Malformed parameters: {e}.") from None
    return dict(pairs)


def _fmt_time(ms: int) -> str:
    if ms is None or ms < 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _fmt_size(n: int) -> str:
    if n is None or n < 0:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Console:
    """The console of one cluster. ``admin`` makes its calls (tests hand in a fake or a real
    :class:`ConsoleAdmin`); ``allowed_hosts``: Host headers it answers (None: any; the
    endpoint sets its bound address, against DNS rebinding)."""

    def __init__(self, admin: ConsoleAdmin, *, allowed_hosts: set[str] | None = None):
        self.admin = admin
        self.csrf = secrets.token_urlsafe(24)
        self.allowed_hosts = allowed_hosts

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Response:
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        as_json = target.startswith("/api/")
        try:
            if len(target) > MAX_TARGET:
                raise BadRequest(f"Request target longer than {MAX_TARGET} bytes.", 414)
            if self.allowed_hosts is not None and headers.get("host", "") not in self.allowed_hosts:
                raise BadRequest("Unknown Host header: this console answers only at its own address.", 421)
            url = urllib.parse.urlsplit(target)
            path = urllib.parse.unquote(url.path, errors="strict")
            params = _parse_params(url.query)
            if method == "POST":
                if len(body) > MAX_BODY:
                    raise BadRequest(f"Form larger than {MAX_BODY} bytes.", 413)
                try:
                    form = _parse_params(body.decode("utf-8"))
                except UnicodeDecodeError:
                    raise BadRequest("The form is not UTF-8.") from None
                if not secrets.compare_digest(form.get("csrf", ""), self.csrf):
                    raise BadRequest("This form is stale or not from this console: reload the page.", 403)
                return self._post(path, form)
            if method not in ("GET", "HEAD"):
                raise BadRequest(f"Method {method} not allowed.", 405)
            return self._get(path, params)
        except (BadRequest, ConsoleError) as e:
            return self._error(e.status, e.message, as_json)
        except UnicodeDecodeError:
            return self._error(400, "The request path is not UTF-8.", as_json)

    def _get(self, path: str, p: dict) -> Response:
        parts = [x for x in path.split("/") if x]
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        if parts and parts[0] == "api":
            return self._api(parts[1:], p)
        if not parts:
            return self.topics_page(p)
        match parts:
            case ["topics", name]:
                return self.topic_page(name, p)
            case ["topics", name, "messages"]:
                return self.messages_page(name, p)
            case ["groups"]:
                return self.groups_page(p)
            case ["groups", gid]:
                return self.group_page(gid, p)
            case ["share-groups"]:
                return self.share_groups_page(p)
            case ["share-groups", gid]:
                return self.share_group_page(gid, p)
            case ["overview"]:
                return self.overview_page(p)
            case ["transactions"]:
                return self.transactions_page(p)
            case ["quotas"]:
                return self.quotas_page(p)
            case ["charts"]:
                return self.charts_page(p)
        raise BadRequest(f"No page at {path}.", 404)

    def _post(self, path: str, f: dict) -> Response:
        parts = [x for x in path.split("/") if x]
        match parts:
            case ["topics"]:
                name = f.get("name", "").strip()
                if not name:
                    raise BadRequest("A topic needs a name.")
                configs = {}
                for line in f.get("configs", "").splitlines():
                    if line.strip():
                        k, eq, v = line.partition("=")
                        if not eq:
                            raise BadRequest(f"Config line {line!r} is not key=value.")
                        configs[k.strip()] = v.strip()
                self.admin.create_topic(
                    name,
                    _int(f, "partitions", -1, lo=-1, hi=100000),
                    _int(f, "replication_factor", -1, lo=-1, hi=32767),
                    configs,
                )
                return self._redirect(f"/topics/{_q(name)}", f"Created topic {name}.")
            case ["topics", name, "delete"]:
                self.admin.delete_topic(name)
                return self._redirect("/", f"Deleted topic {name}.")
            case ["topics", name, "config"]:
                key = f.get("key", "").strip()
                if not key:
                    raise BadRequest("Which config? The key is empty.")
                value = None if f.get("delete") else f.get("value", "")
                self.admin.alter_config(name, key, value)
                return self._redirect(f"/topics/{_q(name)}", f"Altered {key} of topic {name}.")
            case ["topics", name, "produce"]:
                enc = f.get("encoding", "text")
                key = decode_input(f["key"], enc, "key") if f.get("key") else None
                value = decode_input(f.get("value", ""), enc, "value")
                headers = []
                for line in f.get("headers", "").splitlines():
                    if line.strip():
                        k, _eq, v = line.partition("=")
                        headers.append((k.strip(), v.encode("utf-8")))
                partition = _int(f, "partition", None, lo=0)
                part, offset = self.admin.produce(name, partition, key, value, headers)
                return self._redirect(
                    f"/topics/{_q(name)}/messages?partition={part}&offset={offset}",
                    f"Produced a record to {name}-{part} at offset {offset}.",
                )
            case ["groups", gid, "reset"]:
                to = f.get("to", "")
                if to not in ("earliest", "latest", "offset"):
                    raise BadRequest("Reset to earliest, latest or an offset.")
                offset = _int(f, "offset", 0, lo=0) if to == "offset" else None
                done = self.admin.reset_offsets(gid, to, offset)
                return self._redirect(f"/groups/{_q(gid)}", f"Reset {len(done)} partitions of group {gid} to {to}.")
            case ["transactions", "abort"]:
                topic = f.get("topic", "")
                partition = _int(f, "partition", None, lo=0)
                start = _int(f, "start_offset", None, lo=0)
                if not topic or partition is None or start is None:
                    raise BadRequest("Abort needs a topic, a partition and the transaction's start offset.")
                self.admin.abort_transaction(topic, partition, start)
                return self._redirect(
                    "/transactions", f"Aborted the transaction at {topic}-{partition} offset {start}."
                )
        raise BadRequest(f"Nothing to post at {path}.", 404)

    # ------------------------------------------------------------------ responses
    def _redirect(self, to: str, note: str) -> Response:
        sep = "&" if "?" in to else "?"
        loc = f"{to}{sep}note={_q(note)}"
        return Response(303, b"", headers={"Location": loc})

    def _error(self, status: int, message: str, as_json: bool = False) -> Response:
        """The message in the page (an ``/api/`` request: as JSON, ``{"error": message}``)."""
        if as_json:
            return Response(status, json.dumps({"error": message}).encode(), "application/json; charset=utf-8")
        body = f'<div class="error" id="error">{h(message)}</div>'
        return Response(status, self._layout("Error", body).encode())

    def _page(self, title: str, body: str, p: dict | None = None) -> Response:
        note = (p or {}).get("note")
        if note:
            body = f'<div class="note" id="note">{h(note)}</div>' + body
        return Response(200, self._layout(title, body).encode())

    def _layout(self, title: str, body: str) -> str:
        nav = " ".join(f'<a href="{u}">{h(t)}</a>' for u, t in NAV)
        return (
            '<!doctype html><html><head><meta charset="utf-8">'
            f"<title>{h(title)} · kesque console</title>"
            '<link rel="stylesheet" href="/static/console.css"></head><body>'
            f'<header><b>kesque console</b> <span class="bootstrap">{h(self.admin.bootstrap)}</span>'
            f"<nav>{nav}</nav></header><main><h1>{h(title)}</h1>{body}</main>"
            '<script src="/static/console.js"></script></body></html>'
        )

    def _json(self, data) -> Response:
        return Response(
            200, json.dumps(data, default=_json_default, sort_keys=True).encode(), "application/json; charset=utf-8"
        )

    def _static(self, name: str) -> Response:
        if name not in STATIC:
            raise BadRequest(f"No asset {name}.", 404)
        data = resources.files(__package__).joinpath("static", name).read_bytes()
        return Response(200, data, STATIC[name] + "; charset=utf-8", {"Cache-Control": "max-age=300"})

    def _form(self, action: str, inner: str, submit: str, cls: str = "") -> str:
        return (
            f'<form method="post" action="{h(action)}" class="{cls}">'
            f'<input type="hidden" name="csrf" value="{h(self.csrf)}">{inner}'
            f'<button type="submit">{h(submit)}</button></form>'
        )

    # ------------------------------------------------------------------ JSON
    def _api(self, parts: list[str], p: dict) -> Response:
        a = self.admin
        match parts:
            case ["topics"]:
                return self._json(a.topics())
            case ["topics", name]:
                return self._json(a.topic(name))
            case ["topics", name, "messages"]:
                return self._json(self._browse(name, p))
            case ["groups"]:
                return self._json(a.groups())
            case ["groups", gid]:
                return self._json(a.group(gid))
            case ["share-groups", gid]:
                return self._json(a.share_group(gid))
            case ["overview"]:
                return self._json(a.overview())
            case ["transactions"]:
                return self._json(a.transactions())
            case ["quotas"]:
                return self._json(a.quotas())
            case ["stats"]:
                return self._json(a.stats())
        raise BadRequest("No such API.", 404)

    # ------------------------------------------------------------------ topics
    def topics_page(self, p: dict) -> Response:
        a = self.admin
        topics = a.topics()
        cluster_ops = a.cluster_ops()
        show_internal = p.get("internal") == "1"
        rows = "".join(
            f'<tr><td><a href="/topics/{_q(t["name"])}">{h(t["name"])}</a>{" (internal)" if t["internal"] else ""}</td>'
            f"<td>{t['partitions']}</td><td>{t['replication_factor']}</td>"
            f'<td class="{"warn" if t["under_replicated"] else ""}">{t["under_replicated"]}</td>'
            f'<td><a href="/topics/{_q(t["name"])}/messages">messages</a></td></tr>'
            for t in topics
            if show_internal or not t["internal"]
        )
        body = (
            f'<p>{len(topics)} topics. <a href="/?internal={"0" if show_internal else "1"}">'
            f"{'hide' if show_internal else 'show'} internal topics</a></p>"
            '<table id="topics"><tr><th>Topic</th><th>Partitions</th><th>Replication factor</th>'
            f"<th>Under-replicated</th><th></th></tr>{rows}</table>"
        )
        if allowed(cluster_ops, A.CREATE):
            body += "<h2>Create a topic</h2>" + self._form(
                "/topics",
                '<label>Name <input name="name" id="create-name" required maxlength="249"></label>'
                '<label>Partitions <input name="partitions" type="number" min="1" value="1"></label>'
                '<label>Replication factor <input name="replication_factor" type="number" min="-1" value="-1"></label>'
                '<label>Configs (key=value per line) <textarea name="configs" rows="2"></textarea></label>',
                "Create",
                "create-topic",
            )
        return self._page("Topics", body, p)

    def topic_page(self, name: str, p: dict) -> Response:
        t = self.admin.topic(name)
        rows = "".join(
            f"<tr><td>{x['partition']}</td><td>{x['leader']}</td><td>{_ids(x['replicas'])}</td>"
            f'<td class="{"warn" if len(x["isr"]) < len(x["replicas"]) else ""}">{_ids(x["isr"])}</td>'
            f"<td>{x['start_offset']}</td><td>{x['end_offset']}</td><td>{_fmt_size(x['size'])}</td>"
            f'<td><a href="/topics/{_q(name)}/messages?partition={x["partition"]}">browse</a></td></tr>'
            for x in t["partitions"]
        )
        body = (
            f"<p>Topic id {h(t['topic_id'])}{' · internal' if t['internal'] else ''} · "
            f'<a href="/topics/{_q(name)}/messages">messages</a></p>'
            '<h2>Partitions</h2><table id="partitions"><tr><th>Partition</th><th>Leader</th><th>Replicas</th>'
            "<th>ISR</th><th>Start offset</th><th>End offset</th><th>Size (leader)</th><th></th></tr>"
            f"{rows}</table>"
        )

        def rows(configs) -> str:
            return "".join(
                f"<tr><td>{h(c['name'])}</td><td>{h('(sensitive)' if c['sensitive'] else c['value'])}</td>"
                f"<td>{h(c['source'])}</td></tr>"
                for c in configs
            )

        head = "<tr><th>Name</th><th>Value</th><th>Source</th></tr>"
        overridden = [c for c in t["configs"] if c["source"] != "DEFAULT_CONFIG"]
        defaults = [c for c in t["configs"] if c["source"] == "DEFAULT_CONFIG"]
        body += (
            f'<h2>Configs</h2><table id="configs">{head}{rows(overridden)}</table>'
            if overridden
            else "<h2>Configs</h2><p>Every config has its default.</p>"
        )
        if defaults:
            body += (
                f"<details><summary>{len(defaults)} defaults</summary>"
                f'<table id="default-configs">{head}{rows(defaults)}</table></details>'
            )
        if allowed(t["ops"], A.ALTER_CONFIGS):
            body += self._form(
                f"/topics/{_q(name)}/config",
                '<label>Key <input name="key" required></label><label>Value <input name="value"></label>'
                '<label><input type="checkbox" name="delete" value="1"> reset to default</label>',
                "Alter config",
                "alter-config",
            )
        if allowed(t["ops"], A.DELETE):
            body += "<h2>Delete</h2>" + self._form(
                f"/topics/{_q(name)}/delete",
                f"<p>Deletes {h(name)} and all its records.</p>",
                "Delete topic",
                "delete-topic confirm",
            )
        return self._page(f"Topic {name}", body, p)

    # ------------------------------------------------------------------ message browser
    def _browse(self, name: str, p: dict) -> dict:
        partition = _int(p, "partition", 0)
        offset = _int(p, "offset", None)
        ts = _timestamp(p.get("timestamp", "").strip())
        if partition < 0:
            raise BadRequest(f"partition must be at least 0, not {partition}.")
        if offset is not None and offset < 0:
            raise BadRequest(f"offset must be at least 0, not {offset}.", 416)
        limit = _int(p, "limit", 50, lo=1, hi=A.MAX_MESSAGES)
        return self.admin.messages(name, partition, offset, ts, limit, p.get("q", ""))

    def messages_page(self, name: str, p: dict) -> Response:
        t = next((t for t in self.admin.topics() if t["name"] == name), None)
        if t is None:
            raise BadRequest(f"Topic {name} does not exist.", 404)
        try:
            data, problem = self._browse(name, p), None
        except (BadRequest, ConsoleError) as e:
            data, problem = None, e
        search = (
            f'<form method="get" action="/topics/{_q(name)}/messages" class="browse">'
            f'<label>Partition <input name="partition" type="number" value="{h(p.get("partition", "0"))}"></label>'
            f'<label>Offset <input name="offset" value="{h(p.get("offset", ""))}"></label>'
            f'<label>or time (ms or ISO 8601) <input name="timestamp" value="{h(p.get("timestamp", ""))}"></label>'
            f'<label>Limit <input name="limit" type="number" value="{h(p.get("limit", "50"))}"></label>'
            f'<label>Search <input name="q" value="{h(p.get("q", ""))}"></label>'
            '<button type="submit">Show</button></form>'
        )
        body = f'<p><a href="/topics/{_q(name)}">topic {h(name)}</a></p>' + search
        status = 200
        if problem is not None:
            status = problem.status
            body += f'<div class="error" id="error">{h(problem.message)}</div>'
        else:
            rows = "".join(
                f'<tr class="record"><td>{r["offset"]}</td><td>{_fmt_time(r["timestamp"])}</td>'
                f'<td class="key">{show_bytes(r["key"])}</td><td class="value">{show_bytes(r["value"])}</td>'
                f'<td class="headers">{"<br>".join(h(k) + ": " + show_bytes(v) for k, v in r["headers"])}</td></tr>'
                for r in data["records"]
            )
            body += (
                f"<p>Partition {data['partition']}: offsets {data['start_offset']} to {data['end_offset'] - 1}; "
                f"{len(data['records'])} records shown.</p>"
                '<table id="records"><tr><th>Offset</th><th>Timestamp</th><th>Key</th><th>Value</th>'
                "<th>Headers</th></tr>"
                f"{rows}</table>"
            )
            if data["next_offset"] < data["end_offset"]:
                more = {k: v for k, v in p.items() if k in ("limit", "q")}
                more.update(partition=data["partition"], offset=data["next_offset"])
                body += (
                    f'<p><a id="next" href="/topics/{_q(name)}/messages?{h(urllib.parse.urlencode(more))}">'
                    f"next records, from offset {data['next_offset']}</a></p>"
                )
        if allowed(t["ops"], A.WRITE):
            body += "<h2>Produce a record</h2>" + self._form(
                f"/topics/{_q(name)}/produce",
                '<label>Partition (empty: by key) <input name="partition" type="number" min="0"></label>'
                '<label>Key (empty: null) <input name="key" id="produce-key"></label>'
                '<label>Value <textarea name="value" id="produce-value" rows="3"></textarea></label>'
                '<label>Headers (name=value per line) <textarea name="headers" rows="2"></textarea></label>'
                '<label>Key and value are <select name="encoding"><option>text</option><option>base64</option>'
                "<option>hex</option></select></label>",
                "Produce",
                "produce",
            )
        resp = self._page(f"Messages of {name}", body, p)
        resp.status = status
        return resp

    # ------------------------------------------------------------------ consumer groups
    def groups_page(self, p: dict) -> Response:
        groups = [g for g in self.admin.groups() if g["type"] != "share" and g["protocol_type"] in ("consumer", "")]
        rows = "".join(
            f'<tr><td><a href="/groups/{_q(g["group_id"])}">{h(g["group_id"])}</a></td>'
            f"<td>{h(g['state'])}</td><td>{h(g['type'])}</td></tr>"
            for g in groups
        )
        body = (
            f'<table id="groups"><tr><th>Group</th><th>State</th><th>Type</th></tr>{rows}</table>'
            if groups
            else "<p>No consumer groups.</p>"
        )
        return self._page("Consumer groups", body, p)

    def group_page(self, gid: str, p: dict) -> Response:
        g = self.admin.group(gid)
        members = "".join(
            f"<tr><td>{h(m['member_id'])}</td><td>{h(m['client_id'])}</td><td>{h(m['host'])}</td>"
            f"<td>{h(', '.join(f'{t}-{n}' for t, n in m['assignment']))}</td></tr>"
            for m in g["members"]
        )
        parts = "".join(
            f"<tr><td>{h(x['topic'])}</td><td>{x['partition']}</td><td>{h(x['committed'])}</td>"
            f'<td>{x["end_offset"]}</td><td class="lag">{h(x["lag"])}</td><td>{h(x["member_id"])}</td></tr>'
            for x in g["partitions"]
        )
        body = (
            f'<p>State <b id="state">{h(g["state"])}</b> · {h(g["type"])} protocol · assignor {h(g["assignor"])} · '
            f'total lag <b id="total-lag">{g["lag"]}</b></p>'
            f'<h2>Members</h2><table id="members"><tr><th>Member</th><th>Client id</th><th>Host</th>'
            f"<th>Assignment</th></tr>{members}</table>"
            '<h2>Offsets and lag</h2><table id="lag"><tr><th>Topic</th><th>Partition</th><th>Committed</th>'
            f"<th>End offset</th><th>Lag</th><th>Member</th></tr>{parts}</table>"
        )
        if allowed(g["ops"], A.READ) and g["partitions"]:
            if g["members"]:
                body += "<p>Offsets can be reset once the group has no members.</p>"
            else:
                body += "<h2>Reset offsets</h2>" + self._form(
                    f"/groups/{_q(gid)}/reset",
                    '<label>To <select name="to"><option>earliest</option><option>latest</option>'
                    '<option>offset</option></select></label><label>Offset <input name="offset" type="number" min="0">'
                    "</label>",
                    "Reset offsets",
                    "reset-offsets",
                )
        return self._page(f"Consumer group {gid}", body, p)

    # ------------------------------------------------------------------ share groups
    def share_groups_page(self, p: dict) -> Response:
        groups = [g for g in self.admin.groups(("share",)) if g["type"] == "share" or g["protocol_type"] == "share"]
        rows = "".join(
            f'<tr><td><a href="/share-groups/{_q(g["group_id"])}">{h(g["group_id"])}</a></td>'
            f"<td>{h(g['state'])}</td></tr>"
            for g in groups
        )
        body = (
            f'<table id="share-groups"><tr><th>Group</th><th>State</th></tr>{rows}</table>'
            if groups
            else "<p>No share groups.</p>"
        )
        return self._page("Share groups", body, p)

    def share_group_page(self, gid: str, p: dict) -> Response:
        g = self.admin.share_group(gid)
        members = "".join(
            f"<tr><td>{h(m['member_id'])}</td><td>{h(m['client_id'])}</td><td>{h(m['host'])}</td>"
            f"<td>{h(', '.join(m['subscribed']))}</td>"
            f"<td>{h(', '.join(f'{t}-{n}' for t, n in m['assignment']))}</td></tr>"
            for m in g["members"]
        )
        body = (
            f"<p>State <b>{h(g['state'])}</b> · epoch {g['group_epoch']} · assignor {h(g['assignor'])}</p>"
            '<table id="members"><tr><th>Member</th><th>Client id</th><th>Host</th><th>Subscribed</th>'
            f"<th>Assignment</th></tr>{members}</table>"
        )
        return self._page(f"Share group {gid}", body, p)

    # ------------------------------------------------------------------ overview
    def overview_page(self, p: dict) -> Response:
        o = self.admin.overview()
        brokers = "".join(
            f"<tr><td>{b['id']}{' (controller)' if b['id'] == o['controller_id'] else ''}</td>"
            f"<td>{h(b['host'])}:{b['port']}</td><td>{h(b['rack'])}</td>"
            f"<td>{'fenced' if b['fenced'] else 'up'}</td></tr>"
            for b in o["brokers"]
        )
        body = (
            f"<p>Cluster {h(o['cluster_id'])} · controller {o['controller_id']} · {o['topics']} topics · "
            f"{o['partitions']} partitions</p>"
            f'<h2>Brokers</h2><table id="brokers"><tr><th>Id</th><th>Address</th><th>Rack</th><th>State</th></tr>'
            f"{brokers}</table>"
            f'<h2>Partitions</h2><p id="health">Under-replicated: {len(o["under_replicated"])} · '
            f"offline: {len(o['offline'])}</p>"
        )
        for what in ("under_replicated", "offline"):
            if o[what]:
                body += f'<p class="warn">{h(what.replace("_", "-"))}: {h(", ".join(o[what]))}</p>'
        q = o["quorum"]
        if q is not None:
            reps = "".join(
                f"<tr><td>{r['id']}{' (leader)' if r['id'] == q['leader_id'] else ''}</td>"
                f"<td>{'voter' if r['voter'] else 'observer'}</td><td>{r['log_end_offset']}</td><td>{r['lag']}</td>"
                f"<td>{_fmt_time(r['last_caught_up_ms'])}</td></tr>"
                for r in q["replicas"]
            )
            body += (
                f"<h2>Metadata quorum</h2><p>Leader {q['leader_id']} · epoch {q['leader_epoch']} · "
                f"high watermark {q['high_watermark']}</p>"
                '<table id="quorum"><tr><th>Node</th><th>Role</th><th>Log end offset</th><th>Lag</th>'
                f"<th>Last caught up</th></tr>{reps}</table>"
            )
        return self._page("Overview", body, p)

    # ------------------------------------------------------------------ transactions
    def transactions_page(self, p: dict) -> Response:
        data = self.admin.transactions()
        rows = "".join(
            f"<tr><td>{h(t['transactional_id'])}</td><td>{t['producer_id']}</td><td>{t['producer_epoch']}</td>"
            f"<td>{h(t['state'])}</td><td>{_fmt_time(t['start_ms'])}</td><td>{t['timeout_ms']}</td>"
            f"<td>{h(', '.join(f'{a}-{b}' for a, b in t['partitions']))}</td></tr>"
            for t in data["transactions"]
        )
        body = (
            '<table id="transactions"><tr><th>Transactional id</th><th>Producer id</th><th>Epoch</th><th>State</th>'
            f"<th>Started</th><th>Timeout (ms)</th><th>Partitions</th></tr>{rows}</table>"
        )
        can_abort = allowed(data["cluster_ops"], A.CLUSTER_ACTION)
        open_rows = ""
        for o in data["open"]:
            action = ""
            if can_abort:
                action = self._form(
                    "/transactions/abort",
                    f'<input type="hidden" name="topic" value="{h(o["topic"])}">'
                    f'<input type="hidden" name="partition" value="{o["partition"]}">'
                    f'<input type="hidden" name="start_offset" value="{o["start_offset"]}">',
                    "Abort",
                    "abort confirm",
                )
            open_rows += (
                f'<tr class="{"warn" if o["hanging"] else ""}"><td>{h(o["topic"])}-{o["partition"]}</td>'
                f"<td>{o['producer_id']}</td><td>{o['producer_epoch']}</td><td>{o['start_offset']}</td>"
                f"<td>{_fmt_time(o['last_timestamp'])}</td><td>{'hanging' if o['hanging'] else 'open'}</td>"
                f"<td>{action}</td></tr>"
            )
        body += (
            "<h2>Open transactions on partitions</h2>"
            "<p>As kafka-transactions.sh find-hanging: a partition's open transaction whose producer has no "
            "ongoing transaction at its coordinator, or one open longer than the maximum transaction "
            "timeout, is hanging; aborting it writes an abort marker as kafka-transactions.sh abort.</p>"
            '<table id="open"><tr><th>Partition</th><th>Producer id</th><th>Epoch</th><th>Start offset</th>'
            f"<th>Last write</th><th></th><th></th></tr>{open_rows}</table>"
        )
        return self._page("Transactions", body, p)

    # ------------------------------------------------------------------ quotas
    def quotas_page(self, p: dict) -> Response:
        def entity(e: dict) -> str:
            return ", ".join(f"{k}={'<default>' if v is None else v}" for k, v in sorted(e.items()))

        def values(vs: dict) -> str:
            return ", ".join(f"{k}={v:g}" for k, v in sorted(vs.items()))

        rows = "".join(
            f"<tr><td>{h(entity(q['entity']))}</td><td>{h(values(q['values']))}</td></tr>" for q in self.admin.quotas()
        )
        body = (
            f'<table id="quotas"><tr><th>Entity</th><th>Quotas</th></tr>{rows}</table>'
            if rows
            else "<p>No client quotas are set.</p>"
        )
        return self._page("Quotas", body, p)

    # ------------------------------------------------------------------ charts
    def charts_page(self, p: dict) -> Response:
        body = (
            "<p>Messages per second into each topic (end offsets' change) and each consumer group's total lag, "
            'read from <a href="/api/stats">/api/stats</a> every 2 seconds.</p>'
            '<h2>Throughput (records/s)</h2><svg id="chart-throughput" class="chart" width="800" height="220"></svg>'
            '<h2>Consumer lag</h2><svg id="chart-lag" class="chart" width="800" height="220"></svg>'
        )
        return self._page("Charts", body, p)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(int(i)) for i in ids)


def _q(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")
