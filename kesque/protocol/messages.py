"""Build kio request and response objects for the negotiated version, strictly.

Handlers describe a message once, with every field any version has; :class:`Msg` keeps the
fields the negotiated version's dataclass declares, drops the others silently, and converts
kesque's plain ints into kio's time types (milliseconds -> timedelta / datetime).

What it never drops is a name that no version of the API has: a keyword that is not a field of
that struct in any version, or a nested struct name no version defines, raises ``TypeError`` at
once, naming the API, the struct and the field. A misspelled field would otherwise vanish from
the wire and the client would read the field's default.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import os
import re
import sys
from functools import cache

import kio
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from .api import api_name, request_class, response_class

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def _fields(cls) -> dict[str, str]:
    return {f.name: f.metadata.get("kafka_type", "") for f in dataclasses.fields(cls)}


# kio's generated modules declare each struct as a top-level ``class`` and each field as a line
# ``    name: type`` (ClassVars are dunder names): reading the source finds every version's fields
# in a few milliseconds, where importing every version of an API takes tens (a test holds the
# two equal for every API).
_DECLARATION = re.compile(r"^class (\w+)\b|^    ([a-z][a-z0-9_]*): ", re.M)
_KIO_ROOT = os.path.dirname(os.path.dirname(kio.__file__))


def _declared(path: str) -> dict[str, set[str]] | None:
    """Struct name -> field names of the kio module at ``path`` (dotted), from its source."""
    try:
        with open(os.path.join(_KIO_ROOT, *path.split(".")) + ".py", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    out: dict[str, set[str]] = {}
    struct = None
    for m in _DECLARATION.finditer(text):
        if m.group(1):
            struct = out.setdefault(m.group(1), set())
        elif struct is not None:
            struct.add(m.group(2))
    return out


def _imported(path: str) -> dict[str, set[str]]:
    mod = importlib.import_module(path)
    return {
        name: set(_fields(obj))
        for name, obj in vars(mod).items()
        if isinstance(obj, type) and obj.__module__ == path and dataclasses.is_dataclass(obj)
    }


@cache
def known_fields(api_key: int, request: bool, from_source: bool = True) -> dict[str | None, frozenset[str]]:
    """Every struct of an API's requests (or responses) in any version kio knows, with the
    union of its fields over those versions. ``None`` stands for the top-level message."""
    entity = EntityType.request if request else EntityType.response
    out: dict[str | None, set[str]] = {}
    for entities in schema_name_map[api_key_map[api_key]].values():
        path, _, top = entities[entity].partition(":")
        structs = (_declared(path) if from_source else None) or _imported(path)
        for name, fields in structs.items():
            out.setdefault(None if name == top else name, set()).update(fields)
    return {k: frozenset(v) for k, v in out.items()}


def _kind(request: bool) -> str:
    return "request" if request else "response"


def unknown_struct(api_key: int, request: bool, name: str) -> TypeError:
    return TypeError(f"{api_name(api_key)} {_kind(request)} has no struct {name!r} in any version")


def unknown_field(api_key: int, request: bool, name: str | None, field: str) -> TypeError:
    where = f"{api_name(api_key)} {_kind(request)}" + ("" if name is None else f" struct {name}")
    return TypeError(f"{where} has no field {field!r} in any version")


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
    """``Msg(ApiKeys.JOIN_GROUP, v)(error_code=0, ...)`` builds the top-level response of version
    ``v``; ``m("JoinGroupResponseMember", member_id=...)`` a nested struct of it (None when this
    version has no such struct, nor the field that would hold it)."""

    def __init__(self, api_key: int, version: int, request: bool = False):
        self.api_key = api_key
        self.request = request
        self.cls = (request_class if request else response_class)(api_key, version)
        self.mod = sys.modules[self.cls.__module__]

    def __call__(self, _name: str | None = None, **kw):
        cls = self.cls if _name is None else getattr(self.mod, _name, None)
        if cls is None:
            if _name not in known_fields(self.api_key, self.request):
                raise unknown_struct(self.api_key, self.request, _name)
            return None  # a nested struct this version does not have (nor the field holding it)
        fields = _fields(cls)
        args = {}
        for k, v in kw.items():
            kind = fields.get(k)
            if kind is not None:
                args[k] = _convert(kind, v)
            elif k not in known_fields(self.api_key, self.request).get(_name, ()):
                raise unknown_field(self.api_key, self.request, _name, k)
        return cls(**args)

    def has(self, _name: str | None, field: str) -> bool:
        cls = self.cls if _name is None else getattr(self.mod, _name, None)
        return cls is not None and field in _fields(cls)
