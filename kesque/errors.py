"""Kafka error codes as exceptions the domain layers raise and handlers translate."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error", "error_name"]


class KafkaError(Exception):
    """A failure with the Kafka error code the client must see."""

    def __init__(self, code: ErrorCode | int, message: str | None = None):
        self.code = ErrorCode(code)
        super().__init__(message or self.code.name)
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.code.retriable


def error(name: str, message: str | None = None) -> KafkaError:
    """``error("unknown_topic_or_partition", "...")``."""
    return KafkaError(ErrorCode[name], message)


def error_name(code: ErrorCode | int) -> str:
    """Kafka's name of an error code (``DUPLICATE_BROKER_REGISTRATION``), as its logs print it."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{int(code)}"


def code_of(exc: BaseException) -> ErrorCode:
    """Map any exception to the error code Kafka would send for it."""
    if isinstance(exc, KafkaError):
        return exc.code
    code = getattr(exc, "error_code", None)
    if code is not None:
        return ErrorCode(code)
    return ErrorCode.unknown_server_error
