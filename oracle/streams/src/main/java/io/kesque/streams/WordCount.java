package io.kesque.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A word count as the Kafka Streams documentation writes it: lines in, (word, count) out.
 *
 *   WordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR THREADS REPLICATION [GUARANTEE]
 *
 * groupBy(word) makes a repartition topic and count() a changelog topic, both created by Streams
 * with REPLICATION replicas. Runs until SIGTERM (then closes cleanly). Prints on stdout one line
 * per state change of the client ("state REBALANCING -> RUNNING") and "uncaught ..." when a stream
 * thread dies of an exception (the thread is replaced, as REPLACE_THREAD does); Kafka's own log
 * goes where the log4j2 configuration says.
 */
public final class WordCount {
    public static void main(String[] args) throws Exception {
        if (args.length < 7) {
            System.err.println("usage: WordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR THREADS REPLICATION [GUARANTEE]");
            System.exit(2);
        }
        String input = args[1], output = args[2];
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args[5]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args[6]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args.length > 7 ? args[7] : StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
               .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
               .filter((key, word) -> !word.isEmpty())
               .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
               .count()
               .toStream()
               .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("uncaught " + e + " (replacing the thread)");
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.out.println("closed");
            System.out.flush();
            done.countDown();
        }));
        streams.start();
        done.await();
    }
}
