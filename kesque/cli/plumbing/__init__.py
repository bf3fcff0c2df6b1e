"""What Kafka's command-line tools share, so that each module of :mod:`kesque.cli` holds one tool.

* :mod:`.argparse4j` - the argparse4j parser (kafka-transactions.sh, kafka-metadata-quorum.sh,
  kafka-cluster.sh);
* :mod:`.jopt` - jopt-simple's behaviour on argparse (Kafka's other tools);
* :mod:`.admin_client` - Kafka's Admin client: confluent-kafka's for the jopt tools, over
  :mod:`kesque.client.wire` (retries, timeouts) for the others, and the reachability check;
* :mod:`.errors` - Java's exceptions and Kafka's error vocabulary (:class:`.errors.JavaError`);
* :mod:`.run` - exit status, signals;
* :mod:`.javautil` - what the tools print through Java's library (HashMap order, Uuid, dates,
  Properties files, tables).
"""
