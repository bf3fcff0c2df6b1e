package io.kesque.oracle;

import java.io.FileReader;
import java.io.Reader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * kafka-clients against one broker (kesque or Apache Kafka): each scenario prints lines that do not
 * depend on which broker ran it (no ids, no timestamps), so tests/test_oracle_java_clients.py
 * compares the two transcripts.
 *
 * <pre>java -cp ... io.kesque.oracle.Clients SCENARIO BOOTSTRAP [ARGS]</pre>
 * scenarios: codecs N | idempotent | transactions | group classic|consumer | admin | share N |
 * sasl USER PASSWORD MECHANISM... (SASL_PLAINTEXT) | matrix - FILE... (one client configuration a file)
 */
public final class Clients {
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long DEADLINE_MS = 60_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[1];
        switch (args[0]) {
            case "codecs" -> codecs(bootstrap, Integer.parseInt(args[2]));
            case "idempotent" -> idempotent(bootstrap);
            case "transactions" -> transactions(bootstrap);
            case "group" -> group(bootstrap, args[2]);
            case "admin" -> admin(bootstrap);
            case "share" -> share(bootstrap, Integer.parseInt(args[2]));
            case "sasl" -> sasl(bootstrap, args[2], args[3], List.of(args).subList(4, args.length));
            case "matrix" -> matrix(List.of(args).subList(2, args.length));
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
        }
    }

    /** What every client of the running scenario adds (the sasl scenario's security settings). */
    private static final Map<String, String> SECURITY = new TreeMap<>();

    // ------------------------------------------------------------------ helpers
    private static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.putAll(SECURITY);
        return p;
    }

    private static KafkaProducer<byte[], byte[]> producer(String bootstrap, Map<String, Object> extra) {
        Properties p = common(bootstrap);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("acks", "all");
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, Map<String, Object> extra) {
        Properties p = common(bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    private static KafkaShareConsumer<byte[], byte[]> shareConsumer(String bootstrap, String groupId) {
        Properties p = common(bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("group.id", groupId);
        p.put("share.acknowledgement.mode", "explicit");
        return new KafkaShareConsumer<>(p);
    }

    private static String topic(Admin admin, String prefix, int partitions, Map<String, String> configs)
            throws Exception {
        String name = prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1).configs(configs))).all().get();
        return name;
    }

    /** Every record of the partitions from the beginning to their end offsets (as the consumer sees them). */
    private static List<ConsumerRecord<byte[], byte[]>> readAll(KafkaConsumer<byte[], byte[]> c,
                                                                List<TopicPartition> parts, long expected) {
        c.assign(parts);
        c.seekToBeginning(parts);
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (out.size() < expected && System.currentTimeMillis() < deadline) {
            c.poll(POLL).forEach(out::add);
        }
        return out;
    }

    private static byte[] value(String codec, int i) {
        return ("value-" + codec + "-" + i + "-" + "x".repeat(i % 97)).getBytes();
    }

    // ------------------------------------------------------------------ scenarios
    /** N records per codec through the (idempotent) producer, read back in order by a consumer. */
    static void codecs(String bootstrap, int n) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
                String t = topic(admin, "codec-" + codec, 1, Map.of());
                try (var p = producer(bootstrap, Map.of("compression.type", codec, "linger.ms", "5",
                                                        "batch.size", "65536"))) {
                    for (int i = 0; i < n; i++) {
                        p.send(new ProducerRecord<>(t, ("k" + i).getBytes(), value(codec, i)));
                    }
                    p.flush();
                }
                try (var c = consumer(bootstrap, Map.of())) {
                    var records = readAll(c, List.of(new TopicPartition(t, 0)), n);
                    CRC32 crc = new CRC32();
                    boolean inOrder = true;
                    for (int i = 0; i < records.size(); i++) {
                        var r = records.get(i);
                        inOrder &= r.offset() == i && new String(r.value()).equals(new String(value(codec, i)));
                        crc.update(r.value());
                    }
                    System.out.printf("codec %s: produced %d, consumed %d, in order %s, crc %d%n",
                                      codec, n, records.size(), inOrder, crc.getValue());
                }
            }
        }
    }

    /** An idempotent producer with 5 requests in flight over 3 partitions: every record once, in order. */
    static void idempotent(String bootstrap) throws Exception {
        int n = 30_000;
        try (Admin admin = Admin.create(common(bootstrap))) {
            String t = topic(admin, "idem", 3, Map.of());
            try (var p = producer(bootstrap, Map.of("enable.idempotence", "true",
                                                    "max.in.flight.requests.per.connection", "5",
                                                    "linger.ms", "0", "batch.size", "2048"))) {
                for (int i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(t, i % 3, null, ("" + i).getBytes()));
                }
                p.flush();
            }
            List<TopicPartition> parts = List.of(new TopicPartition(t, 0), new TopicPartition(t, 1),
                                                 new TopicPartition(t, 2));
            try (var c = consumer(bootstrap, Map.of())) {
                var records = readAll(c, parts, n);
                Set<String> seen = new HashSet<>();
                Map<Integer, Integer> last = new TreeMap<>();
                boolean ordered = true;
                for (var r : records) {
                    seen.add(new String(r.value()));
                    int v = Integer.parseInt(new String(r.value()));
                    ordered &= v > last.getOrDefault(r.partition(), -1);
                    last.put(r.partition(), v);
                }
                System.out.printf("idempotent: sent %d, read %d, distinct %d, ordered per partition %s%n",
                                  n, records.size(), seen.size(), ordered);
                var ends = c.endOffsets(parts);
                System.out.println("end offsets " + parts.stream().map(ends::get).toList());
            }
        }
    }

    /** A committed, an aborted and a committed transaction; what each isolation level reads. */
    static void transactions(String bootstrap) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            String t = topic(admin, "txn", 1, Map.of());
            try (var p = producer(bootstrap, Map.of("transactional.id", "oracle-" + UUID.randomUUID()))) {
                p.initTransactions();
                int i = 0;
                for (boolean commit : new boolean[] {true, false, true}) {
                    p.beginTransaction();
                    for (int j = 0; j < 10; j++, i++) {
                        p.send(new ProducerRecord<>(t, ((commit ? "c" : "a") + i).getBytes()));
                    }
                    if (commit) {
                        p.commitTransaction();
                    } else {
                        p.flush();
                        p.abortTransaction();
                    }
                }
            }
            TopicPartition tp = new TopicPartition(t, 0);
            for (String isolation : List.of("read_committed", "read_uncommitted")) {
                try (var c = consumer(bootstrap, Map.of("isolation.level", isolation))) {
                    long end = c.endOffsets(List.of(tp)).get(tp);
                    var records = readAll(c, List.of(tp), isolation.equals("read_committed") ? 20 : 30);
                    long aborted = records.stream().filter(r -> new String(r.value()).startsWith("a")).count();
                    System.out.printf("%s: %d records, %d aborted, end offset %d, position %d%n", isolation,
                                      records.size(), aborted, end, c.position(tp));
                }
            }
        }
    }

    /** Two consumers of one group share 4 partitions (group.protocol classic or consumer). */
    static void group(String bootstrap, String protocol) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            String t = topic(admin, "group-" + protocol, 4, Map.of());
            try (var p = producer(bootstrap, Map.of())) {
                for (int i = 0; i < 400; i++) {
                    p.send(new ProducerRecord<>(t, i % 4, null, ("" + i).getBytes()));
                }
                p.flush();
            }
            String groupId = "g-" + UUID.randomUUID();
            Map<String, Set<TopicPartition>> assigned = new ConcurrentHashMap<>();
            Set<String> consumed = ConcurrentHashMap.newKeySet();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> members = new ArrayList<>();
            for (String member : List.of("m1", "m2")) {
                Thread th = new Thread(() -> {
                    try (var c = consumer(bootstrap, Map.of("group.id", groupId, "group.protocol", protocol))) {
                        c.subscribe(List.of(t));
                        while (!stop.get()) {
                            for (var r : c.poll(POLL)) {
                                consumed.add(r.partition() + ":" + r.offset());
                            }
                            assigned.put(member, new HashSet<>(c.assignment()));
                            c.commitSync();
                        }
                    }
                });
                th.start();
                members.add(th);
            }
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (System.currentTimeMillis() < deadline && !(consumed.size() == 400 && balanced(assigned.values()))) {
                Thread.sleep(100);
            }
            var sizes = assigned.values().stream().map(Set::size).sorted().toList();
            stop.set(true);
            for (Thread th : members) {
                th.join();
            }
            var offsets = admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get();
            long committed = offsets.values().stream().mapToLong(o -> o.offset()).sum();
            System.out.printf("group %s: members %d, partitions per member %s, consumed %d, committed %d%n",
                              protocol, assigned.size(), sizes, consumed.size(), committed);
        }
    }

    private static boolean balanced(Collection<Set<TopicPartition>> assignments) {
        Set<TopicPartition> all = new HashSet<>();
        int total = 0;
        for (var a : assignments) {
            if (a.size() != 2) {
                return false;
            }
            all.addAll(a);
            total += a.size();
        }
        return assignments.size() == 2 && all.size() == 4 && total == 4;
    }

    /** AdminClient: create, describe, alter and delete topics and configs. */
    static void admin(String bootstrap) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            System.out.println("cluster nodes " + admin.describeCluster().nodes().get().size());
            String t = topic(admin, "admin", 2, Map.of("retention.ms", "1000000"));
            TopicDescription d = admin.describeTopics(List.of(t)).allTopicNames().get().get(t);
            System.out.printf("created: partitions %d, replicas %d, internal %s%n", d.partitions().size(),
                              d.partitions().get(0).replicas().size(), d.isInternal());
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
            printConfigs(admin, res, "after create");
            admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "200000"), AlterConfigOp.OpType.SET))))
                .all().get();
            // Kafka's brokers apply the change when its metadata record reaches them: wait for it
            long until = System.currentTimeMillis() + DEADLINE_MS;
            while (!"compact".equals(admin.describeConfigs(List.of(res)).all().get().get(res)
                                          .get("cleanup.policy").value())
                   && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
            printConfigs(admin, res, "after alter");
            try {
                admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get();
                System.out.println("bad alter: accepted");
            } catch (Exception e) {
                System.out.println("bad alter: " + e.getCause().getClass().getSimpleName());
            }
            admin.createPartitions(Map.of(t, NewPartitions.increaseTo(4))).all().get();
            System.out.println("after create partitions: "
                               + admin.describeTopics(List.of(t)).allTopicNames().get().get(t).partitions().size());
            try {
                admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get();
            } catch (Exception e) {
                System.out.println("create again: " + e.getCause().getClass().getSimpleName());
            }
            admin.deleteTopics(List.of(t)).all().get();
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (admin.listTopics().names().get().contains(t) && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            System.out.println("listed after delete: " + admin.listTopics().names().get().contains(t));
        }
    }

    private static void printConfigs(Admin admin, ConfigResource res, String when) throws Exception {
        Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
        for (String name : List.of("cleanup.policy", "retention.ms", "max.message.bytes", "segment.bytes")) {
            ConfigEntry e = config.get(name);
            System.out.printf("%s: %s=%s (%s)%n", when, name, e.value(), e.source());
        }
    }

    /**
     * Two KafkaShareConsumers of one share group (explicit acknowledgement) on one partition: half the
     * records are there before the group exists (share.auto.offset.reset=earliest, a group config), the
     * rest arrive while both members poll. Each member accepts what it gets, except the first delivery of
     * every tenth record, which it releases: that record must come back with delivery count 2.
     */
    static void share(String bootstrap, int n) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            String t = topic(admin, "share", 1, Map.of());
            String groupId = "sg-" + UUID.randomUUID();
            ConfigResource group = new ConfigResource(ConfigResource.Type.GROUP, groupId);
            admin.incrementalAlterConfigs(Map.of(group, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
            try (var p = producer(bootstrap, Map.of())) {
                produceShare(p, t, 0, n / 2);
                Set<Integer> accepted = ConcurrentHashMap.newKeySet();
                Set<String> errors = ConcurrentHashMap.newKeySet();
                AtomicInteger acceptedTwice = new AtomicInteger();
                AtomicInteger released = new AtomicInteger();
                AtomicInteger redelivered = new AtomicInteger();
                Set<String> membersWithRecords = ConcurrentHashMap.newKeySet();
                AtomicBoolean stop = new AtomicBoolean();
                List<Thread> members = new ArrayList<>();
                for (String member : List.of("m1", "m2")) {
                    Thread th = new Thread(() -> {
                        try (var c = shareConsumer(bootstrap, groupId)) {
                            c.subscribe(List.of(t));
                            while (!stop.get()) {
                                var records = c.poll(POLL);
                                for (var r : records) {
                                    membersWithRecords.add(member);
                                    int v = Integer.parseInt(new String(r.value()));
                                    short count = r.deliveryCount().orElse((short) -1);
                                    if (count == 1 && v % 10 == 0) {
                                        released.incrementAndGet();
                                        c.acknowledge(r, AcknowledgeType.RELEASE);
                                        continue;
                                    }
                                    if (count == 2) {
                                        redelivered.incrementAndGet();
                                    } else if (count != 1) {
                                        errors.add("delivery count " + count);
                                    }
                                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                                    if (!accepted.add(v)) {
                                        acceptedTwice.incrementAndGet();
                                    }
                                }
                                if (!records.isEmpty()) {
                                    c.commitSync().values().forEach(e -> e.ifPresent(
                                        x -> errors.add("commit " + x.getClass().getSimpleName())));
                                }
                            }
                        }
                    });
                    th.start();
                    members.add(th);
                }
                try {
                    long deadline = System.currentTimeMillis() + DEADLINE_MS;
                    while (System.currentTimeMillis() < deadline && shareMembers(admin, groupId) < 2) {
                        Thread.sleep(100);
                    }
                    produceShare(p, t, n / 2, n);
                    while (System.currentTimeMillis() < deadline && accepted.size() < n) {
                        Thread.sleep(100);
                    }
                } finally {
                    stop.set(true);
                    for (Thread th : members) {
                        th.join();
                    }
                }
                System.out.printf("share: accepted %d distinct, accepted twice %d, released %d redelivered %d "
                                  + "with delivery count 2, members with records %d%n", accepted.size(),
                                  acceptedTwice.get(), released.get(), redelivered.get(), membersWithRecords.size());
                System.out.println("share errors: " + new TreeSet<>(errors));
            }
        }
    }

    /**
     * An AdminClient over SASL_PLAINTEXT with each mechanism in turn, all in this one JVM: PLAIN and
     * SCRAM log in as USER with PASSWORD, OAUTHBEARER with Kafka's unsecured token whose subject is
     * USER (the nodes it sees). PLAIN and SCRAM then try a wrong password: the exception and message
     * the client gets. (Producers, groups and transactions with each mechanism are the matrix
     * scenario's.)
     */
    static void sasl(String bootstrap, String user, String password, List<String> mechanisms) throws Exception {
        for (String mechanism : mechanisms) {
            String module = switch (mechanism) {
                case "PLAIN" -> "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                                + user + "\" password=\"" + password + "\";";
                case "SCRAM-SHA-256", "SCRAM-SHA-512" -> "org.apache.kafka.common.security.scram.ScramLoginModule"
                                + " required username=\"" + user + "\" password=\"" + password + "\";";
                case "OAUTHBEARER" -> "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
                                + " required unsecuredLoginStringClaim_sub=\"" + user + "\";";
                default -> throw new IllegalArgumentException("unknown mechanism " + mechanism);
            };
            SECURITY.clear();
            SECURITY.putAll(Map.of("security.protocol", "SASL_PLAINTEXT", "sasl.mechanism", mechanism,
                                   "sasl.jaas.config", module));
            System.out.println("sasl " + mechanism);
            try (Admin admin = Admin.create(common(bootstrap))) {
                System.out.println("logged in: nodes " + admin.describeCluster().nodes().get().size());
            }
            if (!mechanism.equals("OAUTHBEARER")) {
                String wrong = module.replace("password=\"" + password + "\"", "password=\"wrong\"");
                SECURITY.put("sasl.jaas.config", wrong);
                try (Admin admin = Admin.create(common(bootstrap))) {
                    admin.describeCluster().nodes().get();
                    System.out.println("wrong password: accepted");
                } catch (ExecutionException e) {
                    System.out.println("wrong password: " + e.getCause().getClass().getSimpleName() + ": "
                                       + e.getCause().getMessage());
                }
            }
        }
        SECURITY.clear();
    }

    /**
     * tests/test_security_matrix.py: for each file (Java properties: the client settings of one
     * security configuration, bootstrap.servers included, and matrix.name, matrix.topic,
     * matrix.group, matrix.transactional.id, matrix.records, matrix.transaction.records), on the
     * topic's partition 0: RECORDS records by an acks=all producer, read by a consumer of the group
     * (group.protocol consumer, KIP-848) that commits what it read, then a committed and an aborted
     * transaction of TXN records each, and what a read_committed consumer reads from the beginning
     * to the end offset (once past both transaction markers). The files run at once, a thread each
     * (the clients mostly wait on the broker); one line a file, in the files' order; a failure is
     * that file's line (its exception).
     */
    static void matrix(List<String> files) throws Exception {
        List<Thread> threads = new ArrayList<>();
        String[] lines = new String[files.size()];
        for (int i = 0; i < files.size(); i++) {
            Properties props = new Properties();
            try (Reader r = new FileReader(files.get(i))) {
                props.load(r);
            }
            int index = i;
            Thread th = new Thread(() -> lines[index] = matrixLine(props));
            th.start();
            threads.add(th);
        }
        for (Thread th : threads) {
            th.join();
        }
        for (String line : lines) {
            System.out.println(line);
        }
    }

    private static String matrixLine(Properties props) {
        String name = (String) props.remove("matrix.name");
        try {
            return name + ": " + matrixRun(props);
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            return name + ": failed: " + cause.getClass().getSimpleName() + ": " + cause.getMessage();
        }
    }

    private static Properties matrixClient(Properties security, Map<String, String> extra, boolean producer) {
        Properties p = new Properties();
        p.putAll(security);
        if (producer) {
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            p.put("acks", "all");
        } else {
            p.put("key.deserializer", ByteArrayDeserializer.class.getName());
            p.put("value.deserializer", ByteArrayDeserializer.class.getName());
            p.put("enable.auto.commit", "false");
            p.put("auto.offset.reset", "earliest");
        }
        p.putAll(extra);
        return p;
    }

    private static String matrixRun(Properties security) throws Exception {
        String t = (String) security.remove("matrix.topic");
        String groupId = (String) security.remove("matrix.group");
        String txnId = (String) security.remove("matrix.transactional.id");
        int n = Integer.parseInt((String) security.remove("matrix.records"));
        int txn = Integer.parseInt((String) security.remove("matrix.transaction.records"));
        TopicPartition tp = new TopicPartition(t, 0);
        try (var p = new KafkaProducer<byte[], byte[]>(matrixClient(security, Map.of(), true))) {
            List<Future<?>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(p.send(new ProducerRecord<>(t, 0, null, ("v" + i).getBytes())));
            }
            p.flush();
            for (var f : sent) {
                f.get(DEADLINE_MS, TimeUnit.MILLISECONDS);
            }
        }
        int consumed = 0;
        long committed;
        // KIP-848's protocol (the Python stacks' groups are classic ones)
        var group = Map.of("group.id", groupId, "group.protocol", "consumer");
        try (var c = new KafkaConsumer<byte[], byte[]>(matrixClient(security, group, false))) {
            c.subscribe(List.of(t));
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (consumed < n && System.currentTimeMillis() < deadline) {
                consumed += c.poll(POLL).count();
            }
            c.commitSync();
            OffsetAndMetadata o = c.committed(Set.of(tp)).get(tp);
            committed = o == null ? -1 : o.offset();
        }
        var transactional = Map.of("transactional.id", txnId);
        try (var p = new KafkaProducer<byte[], byte[]>(matrixClient(security, transactional, true))) {
            p.initTransactions();
            for (boolean commit : new boolean[] {true, false}) {
                p.beginTransaction();
                for (int i = 0; i < txn; i++) {
                    p.send(new ProducerRecord<>(t, 0, null, ((commit ? "c" : "a") + i).getBytes()));
                }
                if (commit) {
                    p.commitTransaction();
                } else {
                    p.flush();
                    p.abortTransaction();
                }
            }
        }
        List<String> values = new ArrayList<>();
        long end;
        var readCommitted = Map.of("isolation.level", "read_committed");
        try (var c = new KafkaConsumer<byte[], byte[]>(matrixClient(security, readCommitted, false))) {
            // the transaction markers are written after EndTxn is answered (as in Kafka): wait for
            // the last one, the end offset (the last stable offset) past it
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            end = c.endOffsets(List.of(tp)).get(tp);
            while (end < n + 2 * txn + 2 && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
                end = c.endOffsets(List.of(tp)).get(tp);
            }
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            while (c.position(tp) < end && System.currentTimeMillis() < deadline) {
                c.poll(POLL).forEach(r -> values.add(new String(r.value())));
            }
        }
        return String.format("produced %d, group consumed %d, committed %d, read_committed %s, end offset %d",
                             n, consumed, committed, String.join(",", values), end);
    }

    /** Records from..to-1 (value = its number) in batches of 10, each batch flushed. */
    private static void produceShare(KafkaProducer<byte[], byte[]> p, String t, int from, int to) {
        for (int i = from; i < to; i++) {
            p.send(new ProducerRecord<>(t, 0, null, ("" + i).getBytes()));
            if (i % 10 == 9) {
                p.flush();
            }
        }
        p.flush();
    }

    /** Members of a share group (0 until its first member joins). */
    private static int shareMembers(Admin admin, String groupId) throws Exception {
        try {
            return admin.describeShareGroups(List.of(groupId)).all().get().get(groupId).members().size();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof GroupIdNotFoundException) {
                return 0;
            }
            throw e;
        }
    }
}
