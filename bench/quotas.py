"""The client-quota figures (seed 000): how close a throttled producer stays to its
``producer_byte_rate``, and what quota accounting costs on the small-request path.

* accuracy: a confluent-kafka producer with client id ``capped-<rate>`` sends 1 KiB records
  flat out under a quota set on that client id; the figure is the record bytes acknowledged
  per second, after a warm-up (the burst a fresh rate allows is not measured), against the
  quota. Requests are capped at 1/20 s of quota (``batch.size``) so one request is a small
  part of a window.
* cost: the raw small-request figure (1-record ProduceRequests, 64 in flight) on one broker,
  with quotas configured that every request is accounted against but none throttles
  (``producer_byte_rate`` and ``request_percentage`` on ``/clients/<default>``), and with no
  quota at all, interleaved passes, best of each; the ratio is quotas / none. Each pass also
  counts the broker's CPU seconds (/proc): requests per broker CPU second is the same ratio
  measured by work done rather than wall time, which other load on the machine disturbs less.

Nothing here asserts on timing. See bench/README.md, "Client quotas".
"""

from __future__ import annotations

import time

import figures
from confluent_kafka import Producer

from kesque.protocol.api_keys import ApiKeys

VALUE = b"q" * 1024
KEYS_ON_DEFAULT = {"producer_byte_rate": 1e15, "request_percentage": 1e9}


def alter_quotas(bootstrap: str, entity: list[tuple[str, str | None]], ops: dict[str, float | None]) -> None:
    from kesque.client.wire import Connection, make

    with Connection.to_any(bootstrap, client_id="bench-quotas") as conn:

        def build(mod, v):
            rq = mod.request
            return make(
                rq.AlterClientQuotasRequest,
                validate_only=False,
                entries=(
                    make(
                        rq.EntryData,
                        entity=tuple(make(rq.EntityData, entity_type=t, entity_name=n) for t, n in entity),
                        ops=tuple(
                            make(rq.OpData, key=k, value=0.0 if x is None else x, remove=x is None)
                            for k, x in ops.items()
                        ),
                    ),
                ),
            )

        resp = conn.request(ApiKeys.ALTER_CLIENT_QUOTAS, build)
    for e in resp.entries:
        if int(e.error_code):
            raise RuntimeError(f"AlterClientQuotas failed: {e.error_code.name} {e.error_message}")


def accuracy(bootstrap: str, topic: str, rate: int, seconds: float, warmup: float) -> dict:
    client = f"capped-{rate}"
    alter_quotas(bootstrap, [("client-id", client)], {"producer_byte_rate": float(rate)})
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": max(4096, min(rate // 20, 1 << 20)),
            "queue.buffering.max.kbytes": 4096,
            "log_level": 3,
        }
    )
    p.list_topics(topic, timeout=30)
    acked = [0, 0]
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            if len(errors) < 5:
                errors.append(str(err))
        elif start <= time.monotonic() < end:
            acked[0] += len(msg.value())
            acked[1] += 1

    start = time.monotonic() + warmup
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.005)
        p.poll(0)
    p.flush(120)
    measured = acked[0] / seconds
    return {
        "quota": rate,
        "rate": measured,
        "ratio": measured / rate,
        "records": acked[1],
        "seconds": seconds,
        "warmup": warmup,
        "errors": errors,
    }


def cost(bootstrap: str, topic: str, requests: int, passes: int, pid: int | None = None) -> dict:
    """Interleaved passes of the raw small-request figure without and with quotas (and, with
    the broker's ``pid``, its requests per CPU second in each pass)."""
    from run import proc_cpu_seconds

    out: dict = {"none": [], "quotas": []}
    default = [("client-id", None)]
    for k in range(passes):
        order = ("none", "quotas") if k % 2 == 0 else ("quotas", "none")
        for kind in order:
            alter_quotas(bootstrap, default, KEYS_ON_DEFAULT if kind == "quotas" else dict.fromkeys(KEYS_ON_DEFAULT))
            cpu0 = proc_cpu_seconds(pid) if pid else float("nan")
            r = figures.small_raw(bootstrap, topic, requests)
            r["per_cpu_second"] = requests / (proc_cpu_seconds(pid) - cpu0) if pid else float("nan")
            out[kind].append(r)
    alter_quotas(bootstrap, default, dict.fromkeys(KEYS_ON_DEFAULT))
    best = {kind: max(r["rate"] for r in runs) for kind, runs in out.items()}
    best_cpu = {kind: max(r["per_cpu_second"] for r in runs) for kind, runs in out.items()}
    return {
        "passes": out,
        "best": best,
        "ratio": best["quotas"] / best["none"],
        "best_per_cpu_second": best_cpu,
        "cpu_ratio": best_cpu["quotas"] / best_cpu["none"],
        "first_response_errors": [e for runs in out.values() for r in runs for e in r["first_response_errors"]],
    }
