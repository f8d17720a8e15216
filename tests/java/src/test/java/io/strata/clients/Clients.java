package io.strata.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Client configurations and small helpers shared by the tests. */
public final class Clients {
    public static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Clients() {
    }

    public static String uniqueTopic(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    public static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        return Admin.create(p);
    }

    public static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    public static KafkaProducer<byte[], byte[]> producer(Properties p) {
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    public static Properties consumerProps(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    public static KafkaConsumer<byte[], byte[]> consumer(Properties p) {
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    public static <T> T get(KafkaFuture<T> f) throws ExecutionException {
        try {
            return f.get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        } catch (TimeoutException e) {
            throw new AssertionError("no answer within " + TIMEOUT, e);
        }
    }

    /** The cause of the ExecutionException the future fails with (fails if it succeeds). */
    public static Throwable failure(KafkaFuture<?> f) {
        try {
            Object v = get(f);
            throw new AssertionError("expected a failure, got success: " + v);
        } catch (ExecutionException e) {
            return e.getCause();
        }
    }

    public static void createTopic(Admin admin, String topic, int partitions, int rf, Map<String, String> configs)
            throws ExecutionException {
        NewTopic nt = new NewTopic(topic, partitions, (short) rf).configs(configs);
        get(admin.createTopics(List.of(nt)).all());
        waitForLeaders(admin, topic, partitions);
    }

    public static void createTopic(String bootstrap, String topic, int partitions) throws ExecutionException {
        try (Admin a = admin(bootstrap)) {
            createTopic(a, topic, partitions, 1, Map.of());
        }
    }

    /** Waits until the topic shows {@code partitions} partitions, each with a leader. */
    public static TopicDescription waitForLeaders(Admin admin, String topic, int partitions) {
        return Wait.until(TIMEOUT, "every partition of " + topic + " to have a leader", () -> {
            try {
                TopicDescription d = get(admin.describeTopics(List.of(topic)).topicNameValues().get(topic));
                boolean ok = d.partitions().size() == partitions
                        && d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty());
                return ok ? Wait.Check.done(d) : Wait.Check.notYet(d.toString());
            } catch (ExecutionException e) {
                return Wait.Check.notYet(e.getCause().toString());
            }
        });
    }

    public static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(new TopicPartition(topic, i));
        }
        return out;
    }

    /** Every record of the given partitions, from the log start to the end offset seen
     *  when reading began, in partition then offset order. */
    public static List<ConsumerRecord<byte[], byte[]>> readAll(String bootstrap, Collection<TopicPartition> tps,
                                                                Properties extra) {
        Properties p = consumerProps(bootstrap, null);
        p.putAll(extra);
        try (KafkaConsumer<byte[], byte[]> c = consumer(p)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, TIMEOUT);
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = new HashMap<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, TIMEOUT) < end.get(tp)) {
                        done = false;
                        break;
                    }
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    Map<TopicPartition, Long> pos = tps.stream()
                            .collect(Collectors.toMap(tp -> tp, tp -> c.position(tp, TIMEOUT)));
                    throw new AssertionError("read did not reach the end offsets " + end + " within 60 s; positions "
                            + pos);
                }
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    got.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>()).add(r);
                }
            }
            List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
            for (TopicPartition tp : tps) {
                for (ConsumerRecord<byte[], byte[]> r : got.getOrDefault(tp, List.of())) {
                    if (r.offset() < end.get(tp)) {
                        out.add(r);
                    }
                }
            }
            return out;
        }
    }

    public static List<ConsumerRecord<byte[], byte[]>> readAll(String bootstrap, String topic, int partitions) {
        return readAll(bootstrap, partitions(topic, partitions), new Properties());
    }

    /** Replica node ids of each partition. */
    public static Map<Integer, List<Integer>> replicas(TopicDescription d) {
        Map<Integer, List<Integer>> out = new HashMap<>();
        for (TopicPartitionInfo p : d.partitions()) {
            out.put(p.partition(), p.replicas().stream().map(n -> n.id()).collect(Collectors.toList()));
        }
        return out;
    }

    public static Set<String> listTopics(Admin admin) throws ExecutionException {
        return get(admin.listTopics().names());
    }
}
