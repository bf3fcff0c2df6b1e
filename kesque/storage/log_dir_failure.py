"""LogDirFailureChannel: an I/O error takes its log dir offline (Kafka's LogDirFailureChannel,
KIP-112).

Whatever writes or reads a log dir (a partition log, the LogManager's checkpoints, log creation) runs the
operation through :func:`maybe_handle_io_error`: when the dir is already offline it refuses
at once (KAFKA_STORAGE_ERROR, nothing touches the disk again); an ``OSError`` marks the dir
offline here and becomes a :class:`KafkaStorageError` for the caller. The first failure of a
dir is recorded once, with its message, and queued for the handler (the server's: it marks
the dir's partitions offline, tells the controller, halts when no dir is left); later failures
of the same dir are logged only. A dir stays offline until the process restarts.

Errors that are not ``OSError`` (bad input, a bug) pass through unchanged: they are not the
disk's fault.

The channel holds no I/O and no event loop: ``on_offline(dir)`` is called (from whatever thread
failed) for a dir's first failure; the server binds it to its loop.
"""

from __future__ import annotations

import logging
import threading

from ..errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class KafkaStorageError(KafkaError):
    """Kafka's KafkaStorageException: the log dir holding the data is offline (error 56)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.kafka_storage_error, message)


class LogDirFailureChannel:
    def __init__(self, on_offline=None):
        self._offline: dict[str, str] = {}  # dir -> the message of its first failure
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self.on_offline = on_offline

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    @property
    def offline_dirs(self) -> dict[str, str]:
        return dict(self._offline)

    def maybe_add_offline_log_dir(self, log_dir: str, msg: str, exc: BaseException | None = None) -> None:
        """Log the failure; the first one of ``log_dir`` takes it offline and is queued."""
        log.error("%s: %s", msg, exc)
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline[log_dir] = f"{msg}: {exc}" if exc is not None else msg
                self._queue.append(log_dir)
        if first and self.on_offline is not None:
            self.on_offline(log_dir)

    def take_offline_log_dirs(self) -> list[str]:
        """The dirs gone offline since the last call (Kafka's takeNextOfflineLogDir, drained)."""
        with self._lock:
            out, self._queue = self._queue, []
        return out


def offline_error(log_dir: str) -> KafkaStorageError:
    return KafkaStorageError(f"The log dir {log_dir} is already offline due to a previous IO exception.")


def maybe_handle_io_error(channel: LogDirFailureChannel | None, log_dir: str, msg, fn, *args):
    """Run ``fn(*args)`` for ``log_dir`` as Kafka's maybeHandleIOException: refused when the
    dir is offline; an ``OSError`` takes the dir offline and raises KafkaStorageError.
    ``msg``: the error message, or a callable returning it (built only on failure)."""
    if channel is not None and log_dir in channel._offline:
        raise offline_error(log_dir)
    try:
        return fn(*args)
    except OSError as e:
        text = msg() if callable(msg) else msg
        if channel is not None:
            channel.maybe_add_offline_log_dir(log_dir, text, e)
        raise KafkaStorageError(f"{text}: {e}") from e
