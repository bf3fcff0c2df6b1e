"""The web console (issue 29; docs/console.md): server-rendered HTML pages over the Kafka
protocol, so it reads any Kafka-protocol cluster. ``kesque console --bootstrap-server ...`` runs
it alone; ``console.listener=http://127.0.0.1:8080`` starts it inside ``kesque serve``.

* :mod:`.admin`: the cluster calls the pages make (kesque's own wire client, blocking);
* :mod:`.app`: routes and pages, a pure function of a request (tested without sockets);
* :mod:`.endpoint`: the standard library's threading HTTP server that serves :mod:`.app`.
"""
