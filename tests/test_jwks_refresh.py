"""An OAUTHBEARER listener's JWKS fetched again from its http(s) endpoint, as Kafka 4.4's
RefreshingHttpsJwks (issue 27): every sasl.oauthbearer.jwks.endpoint.refresh.ms, at once for a
token whose kid is unknown (once a minute per kid at most), with the fetch retried after
...retry.backoff.ms doubling within ...retry.backoff.max.ms, and off the event loop. The JWKS
server is a local HTTP server on 127.0.0.1 whose keys the tests rotate."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from kesque.config import BrokerConfig
from kesque.errors import ErrorCode
from kesque.security.oauthbearer import RefreshingJwks, Retry
from kesque.server import sasl as sasl_driver
from kesque.server.sasl import SaslListener
from kesque.testing.broker import Broker
from kesque.testing.kafka import free_port
from test_sasl import OAUTH_JAAS, oauth_message, sasl_authenticate, sasl_handshake
from wire import WireClient

REFUSED = b'{"status":"invalid_token"}'


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key, kid: str) -> dict:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, alg="RS256", use="sig")
    return jwk


def token(key, kid: str, sub: str = "alice") -> str:
    claims = {"sub": sub, "exp": int(time.time()) + 60, "iat": int(time.time()) - 1}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


class JwksServer:
    """A JWKS endpoint on 127.0.0.1: ``keys`` is what it serves, ``fail`` how many of the next
    fetches get HTTP 500, ``hits`` how many fetches it answered."""

    def __init__(self, keys: list[dict]):
        self.keys, self.fail, self.hits = keys, 0, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                owner.hits += 1
                if owner.fail > 0:
                    owner.fail -= 1
                    self.send_error(500, "down for a moment")
                    return
                body = json.dumps({"keys": owner.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def jwks_server():
    k1 = new_key()
    server = JwksServer([public_jwk(k1, "k1")])
    server.k1 = k1
    yield server
    server.close()


def listener(url: str, **settings) -> SaslListener:
    cfg = BrokerConfig(
        {
            "listeners": "JWT://127.0.0.1:0",
            "listener.security.protocol.map": "JWT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.jwt.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "listener.name.jwt.sasl.oauthbearer.jwks.endpoint.url": url,
            **{f"sasl.oauthbearer.jwks.endpoint.{k.replace('_', '.')}": str(v) for k, v in settings.items()},
        }
    )
    return SaslListener(cfg, "JWT", lambda mechanism, user: None, lambda: int(time.time() * 1000))


def login(lis: SaslListener, tok: str) -> bool:
    return lis.new_server("OAUTHBEARER").evaluate(oauth_message(tok)) == b""


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def run(lis: SaslListener, scenario) -> None:
    async def main():
        lis.start(asyncio.get_running_loop())
        try:
            await scenario()
        finally:
            lis.stop()

    asyncio.run(main())


# ------------------------------------------------------------------------------------ in process
def test_a_token_with_an_unknown_kid_refreshes_the_keys_at_once(jwks_server, monkeypatch):
    s = jwks_server
    lis = listener(s.url)  # refresh.ms at Kafka's default: an hour
    assert s.hits == 1 and login(lis, token(s.k1, "k1"))
    loop_thread = []
    fetch_threads = []
    fetch = sasl_driver.fetch_jwks
    monkeypatch.setattr(
        sasl_driver, "fetch_jwks", lambda url: fetch_threads.append(threading.get_ident()) or fetch(url)
    )
    k2 = new_key()
    s.keys = [public_jwk(s.k1, "k1"), public_jwk(k2, "k2")]  # the identity provider rotates in k2

    async def scenario():
        loop_thread.append(threading.get_ident())
        refresher = lis.jwks_refresher
        assert not login(lis, token(k2, "k2"))  # refused: the keys are a refresh behind
        await until(lambda: refresher.refreshes == 1)
        assert s.hits == 2
        assert login(lis, token(k2, "k2")) and login(lis, token(s.k1, "k1"))
        # a kid still unknown after a refresh asks once, then not again within the minute
        assert not login(lis, token(k2, "k3"))
        await until(lambda: refresher.refreshes == 2)
        for _ in range(5):
            assert not login(lis, token(k2, "k3"))
        await asyncio.sleep(0.3)
        assert s.hits == 3 and refresher.refreshes == 2

    run(lis, scenario)
    assert fetch_threads and loop_thread[0] not in fetch_threads  # the fetches ran off the event loop


def test_the_keys_are_fetched_again_every_refresh_ms(jwks_server):
    s = jwks_server
    lis = listener(s.url, refresh_ms=300)
    new = new_key()
    s.keys = [public_jwk(new, "k1")]  # the same kid, a new key: no token asks for a refresh

    async def scenario():
        assert login(lis, token(s.k1, "k1")) and not login(lis, token(new, "k1"))
        assert lis.jwks_refresher.refreshes == 0
        await until(lambda: lis.jwks_refresher.refreshes >= 1)
        assert login(lis, token(new, "k1")) and not login(lis, token(s.k1, "k1"))
        await until(lambda: lis.jwks_refresher.refreshes >= 2)  # at a fixed rate
        assert 2 <= s.hits - 1 <= 4

    run(lis, scenario)


def test_a_failed_fetch_is_retried_with_backoff_and_a_refresh_that_fails_keeps_the_keys(jwks_server):
    s = jwks_server
    lis = listener(s.url, retry_backoff_ms=50, retry_backoff_max_ms=5000)
    k2 = new_key()
    s.keys = [public_jwk(s.k1, "k1"), public_jwk(k2, "k2")]

    async def scenario():
        s.fail = 2
        t0 = time.monotonic()
        assert not login(lis, token(k2, "k2"))
        await until(lambda: lis.jwks_refresher.refreshes == 1)
        assert time.monotonic() - t0 >= 0.15  # waited 50 then 100 ms between the three attempts
        assert s.hits == 1 + 3 and login(lis, token(k2, "k2"))

    run(lis, scenario)

    lis = listener(s.url, retry_backoff_ms=50, retry_backoff_max_ms=200)
    failing = [public_jwk(s.k1, "k1")]

    async def down():
        s.keys, s.fail = failing, 1000
        hits = s.hits
        assert not login(lis, token(new_key(), "k9"))
        await until(lambda: not lis.jwks_refresher.core.in_progress and s.hits > hits)
        # retried within retry.backoff.max.ms (4 attempts at most: 0, 50, 150, 200 ms), then given
        # up (how many fit depends on how fast the server answers: test_retry_* counts them)
        assert 1 <= s.hits - hits <= 4 and lis.jwks_refresher.refreshes == 0
        assert login(lis, token(k2, "k2"))  # the keys it had are kept

    run(lis, down)


def test_a_file_jwks_is_read_once(tmp_path):
    key = new_key()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(key, "k1")]}))
    lis = listener(f"file://{path}", refresh_ms=100)
    assert lis.jwks_refresher is None and login(lis, token(key, "k1"))  # Kafka's JwksFileVerificationKeyResolver


# ------------------------------------------------------------------------------------ sans-IO
class FakeClock:
    def __init__(self):
        self.now, self.slept = 0, []

    def sleep(self, ms):
        self.slept.append(ms)
        self.now += ms


def test_retry_doubles_its_wait_within_the_max():
    clock = FakeClock()
    retry = Retry(100, 1000, lambda: clock.now, clock.sleep)
    calls = []

    def failing():
        calls.append(clock.now)
        raise OSError(f"attempt {len(calls)}")

    with pytest.raises(OSError, match="attempt 1"):  # the first error
        retry.execute(failing)
    assert clock.slept == [100, 200, 400, 300]  # the last wait cut to what is left of the 1,000 ms
    assert calls == [0, 100, 300, 700, 1000]
    ok = FakeClock()
    outcomes = iter([OSError("x"), "keys"])

    def flaky():
        o = next(outcomes)
        if isinstance(o, Exception):
            raise o
        return o

    assert Retry(100, 1000, lambda: ok.now, ok.sleep).execute(flaky) == "keys" and ok.slept == [100]
    with pytest.raises(ValueError, match=r"retryBackoffMaxMs value \(10\) is less than retryBackoffMs value \(100\)"):
        Retry(100, 10, lambda: 0, lambda ms: None)


def test_missing_kids_ask_for_a_refresh_once_a_minute_and_sixteen_are_remembered():
    core = RefreshingJwks(3_600_000)
    assert core.maybe_expedite_refresh("a", 0)
    assert not core.maybe_expedite_refresh("a", 59_999)
    assert core.maybe_expedite_refresh("a", 60_000)
    assert not core.maybe_expedite_refresh("x" * 1001, 0)  # taken for a malformed token
    for i in range(16):
        assert core.maybe_expedite_refresh(f"k{i}", 60_000)
    assert core.maybe_expedite_refresh("a", 60_001)  # "a" fell out of the 16 remembered
    core.finished({"keys": [{"kid": "k15"}]})  # a refresh that brought k15 forgets it
    assert core.maybe_expedite_refresh("k15", 60_002)
    assert core.start() and not core.start()  # one refresh at a time
    core.finished(None)
    assert core.start()
    with pytest.raises(ValueError, match="must be positive"):
        RefreshingJwks(0)


# ------------------------------------------------------------------------------------ a broker
def test_a_broker_takes_a_rotated_key_after_the_refresh_an_unknown_kid_starts(jwks_server):
    s = jwks_server
    port = free_port()
    b = Broker(
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:0,JWT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,JWT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.jwt.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "listener.name.jwt.sasl.oauthbearer.jwks.endpoint.url": s.url,
        }
    ).start()
    try:
        k2 = new_key()
        s.keys = [public_jwk(k2, "k2")]  # k1 retired, k2 in

        def attempt(tok: str) -> int:
            with WireClient(f"127.0.0.1:{port}") as c:
                assert sasl_handshake(c, "OAUTHBEARER").error_code == ErrorCode.none
                r = sasl_authenticate(c, oauth_message(tok))
                if r.auth_bytes == REFUSED:
                    return sasl_authenticate(c, b"\x01").error_code
                return r.error_code

        assert attempt(token(k2, "k2")) == ErrorCode.sasl_authentication_failed  # refused, a refresh starts
        deadline = time.monotonic() + 10
        while attempt(token(k2, "k2")) != ErrorCode.none:  # the client's next login
            assert time.monotonic() < deadline, "the rotated key was not fetched"
            time.sleep(0.2)
        assert attempt(token(s.k1, "k1")) == ErrorCode.sasl_authentication_failed  # k1 is gone; kid asked already
    finally:
        b.stop()
        b.close()
