"""Build kio request and response objects for the request's version.

Handlers describe a response once, with every field any version has; :class:`Msg` keeps the
fields the negotiated version's dataclass declares and converts kesque's plain ints into
kio's time types (milliseconds -> timedelta / datetime).
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from functools import lru_cache

from .api import request_class, response_class

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


@lru_cache(maxsize=None)
def _fields(cls) -> dict[str, str]:
    return {f.name: f.metadata.get("kafka_type", "") for f in dataclasses.fields(cls)}


def _convert(kind: str, value):
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if kind == "datetime_i64":
        return None if value < 0 else EPOCH + datetime.timedelta(milliseconds=value)
    return value


def to_ms(value) -> int:
    """kio time value back to integer milliseconds (-1 for None)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int((value - EPOCH) / datetime.timedelta(milliseconds=1))
    return int(value)


class Msg:
    def __init__(self, api_key: int, version: int, request: bool = False):
        self.cls = (request_class if request else response_class)(api_key, version)
        self.mod = sys.modules[self.cls.__module__]

    def __call__(self, _name: str | None = None, **kw):
        cls = self.cls if _name is None else getattr(self.mod, _name, None)
        if cls is None:
            return None  # a nested struct this version does not have (nor the field holding it)
        fields = _fields(cls)
        return cls(**{k: _convert(fields[k], v) for k, v in kw.items() if k in fields})

    def has(self, _name: str | None, field: str) -> bool:
        cls = self.cls if _name is None else getattr(self.mod, _name, None)
        return cls is not None and field in _fields(cls)
