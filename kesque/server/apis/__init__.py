"""API handlers: thin translations between protocol messages and domain calls. Each declares
the APIs it serves as data and takes exactly the collaborators it uses; the server builds them
(``KesqueServer._build_handlers``) and :mod:`.registry` turns the declarations into tables."""

from __future__ import annotations


def served_versions(config: dict | None = None) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} that a broker with ``config`` advertises, without starting one
    (docs, tests): :func:`.registry.served_versions`."""
    # lazy: txn_channels imports apis.committed, and transactions.py imports txn_channels, so
    # this package must not import its handlers when it loads
    from .registry import served_versions as declared_versions

    return declared_versions(config)
