"""Share sessions (KIP-932): the partitions a share consumer fetches from one broker.

A share session is keyed by (group id, member id). A ShareFetch with epoch 0 opens it (a
session the member already had is replaced, and what it held is released), later requests
carry the epoch the broker expects next (1, 2, ... wrapping to 1) and list only partitions to
add, plus forgotten ones to drop. Epoch -1 closes the session: its acknowledgements are still
applied, then everything the member holds on this broker is released. ShareAcknowledge uses
the same session and epoch but never opens one. As Kafka's ShareSessionCache, a session belongs
to the connection that opened it: when that connection closes the session ends (and what the
member holds is released), whereas the member leaving its share group (a ShareGroupHeartbeat
with epoch -1, answered by the group coordinator) does not touch it, so a consumer that leaves
and sends its final acknowledgements at the same time (librdkafka's close) has them applied.
Errors are Kafka's:
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED.
Sans-IO: time is passed in.
"""

from __future__ import annotations

from collections import OrderedDict

from kesque.errors import error

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1


class ShareSession:
    def __init__(self, key: tuple[str, str], now_ms: int, connection_id: str | None = None):
        self.key = key
        self.connection_id = connection_id  # the connection that opened it
        self.epoch = 1  # the next epoch expected
        self.partitions: OrderedDict[tuple, None] = OrderedDict()  # (topic id, partition)
        self.last_used = now_ms

    def bump(self, now_ms: int) -> None:
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self.last_used = now_ms


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(
        self, group_id: str, member_id: str, now_ms: int, connection_id: str | None = None
    ) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session (of the connection ``connection_id``); returns it and the one
        it replaced (whose records go back)."""
        key = (group_id, member_id)
        old = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if old is not None:
                self.sessions[key] = old
            raise error("share_session_limit_reached", "The limit of share sessions has been reached.")
        s = self.sessions[key] = ShareSession(key, now_ms, connection_id)
        return s, old

    def use(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession:
        """Epoch > 0 or -1: the member's session, which must expect ``epoch`` (any, for -1).
        A closing request removes the session; others move its epoch on."""
        key = (group_id, member_id)
        s = self.sessions.get(key)
        if s is None:
            raise error(
                "share_session_not_found", f"Share session for member {member_id} of group {group_id} was not found."
            )
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            return s
        if epoch != s.epoch:
            raise error(
                "invalid_share_session_epoch",
                f"The share session epoch {epoch} does not match the expected epoch {s.epoch}.",
            )
        s.bump(now_ms)
        return s

    def expired(self, idle_ms: int, now_ms: int) -> list[ShareSession]:
        """Remove and return the sessions idle for ``idle_ms`` (their members are gone)."""
        old = [s for s in self.sessions.values() if now_ms - s.last_used >= idle_ms]
        for s in old:
            del self.sessions[s.key]
        return old

    def connection_closed(self, connection_id: str) -> list[ShareSession]:
        """Remove and return the sessions the closed connection opened."""
        gone = [s for s in self.sessions.values() if s.connection_id == connection_id]
        for s in gone:
            del self.sessions[s.key]
        return gone
