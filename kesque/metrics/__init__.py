"""Prometheus metrics (issue 29): a node with ``metrics.listener=http://host:port`` serves
``/metrics`` with the names the Prometheus JMX exporter's Kafka rules give Kafka's MBeans, so that
dashboards made for Kafka work (docs/metrics.md has the mapping and what kesque adds).

``stats``: the counters the request path increments; ``collectors``: what is read from the
broker at scrape time; ``endpoint``: the HTTP server.
"""
