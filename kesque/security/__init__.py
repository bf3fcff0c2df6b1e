"""kesque's security cores, sans-IO (issue 27): principals and ``ssl.principal.mapping.rules``
(``principal.py``), ACLs and Kafka's StandardAuthorizer (``acl.py``, ``authorizer.py``), and the
server side of the SASL mechanisms PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (``plain.py``,
``scram.py``, ``oauthbearer.py``). No sockets, no event loop, time passed in: the network layer
and the handlers drive them."""
