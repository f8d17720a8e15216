package io.strata.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.DefaultRecord;
import org.apache.kafka.common.record.DefaultRecordBatch;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The Java producer (Produce v3-9, InitProducerId) against one agent; everything read
 *  back with the Java consumer (Fetch, ListOffsets) and compared byte for byte. */
class ProducerTest {
    @RegisterExtension
    static final StrataExtension strata = StrataExtension.singleNode();

    /** strata's (and Kafka's) default max.message.bytes: 1 MiB + 12 bytes of log overhead. */
    static final int DEFAULT_MAX_MESSAGE_BYTES = 1048588;
    static final long BASE_TS = 1_700_000_000_000L;

    /** A record to produce, with everything the test compares after reading it back. */
    record Out(int partition, byte[] key, byte[] value, List<Header> headers, long timestamp) {
        ProducerRecord<byte[], byte[]> toRecord(String topic) {
            return new ProducerRecord<>(topic, partition, timestamp, key, value, new ArrayList<>(headers));
        }
    }

    /** Sends every record (in order, one producer), waits for every ack; returns the acks in send order. */
    static List<RecordMetadata> produce(Properties props, String topic, List<Out> outs) throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(props)) {
            for (Out o : outs) {
                fs.add(p.send(o.toRecord(topic)));
            }
            p.flush();
            List<RecordMetadata> acks = new ArrayList<>();
            for (Future<RecordMetadata> f : fs) {
                acks.add(f.get(60, TimeUnit.SECONDS));
            }
            return acks;
        }
    }

    /** Acked offsets are dense from 0 per partition in send order; reading the topic back gives
     *  exactly the records sent, byte for byte, at the acked offsets. */
    static void checkRoundTrip(String topic, int partitions, List<Out> outs, List<RecordMetadata> acks) {
        Map<Integer, Long> next = new HashMap<>();
        Map<TopicPartition, Map<Long, Out>> expected = new HashMap<>();
        for (int i = 0; i < outs.size(); i++) {
            Out o = outs.get(i);
            RecordMetadata m = acks.get(i);
            assertEquals(o.partition(), m.partition(), "ack " + i + " partition");
            long want = next.getOrDefault(o.partition(), 0L);
            assertEquals(want, m.offset(), "record " + i + " to partition " + o.partition()
                    + ": offsets must be dense from 0 in send order");
            next.put(o.partition(), want + 1);
            assertEquals(o.timestamp(), m.timestamp(), "ack " + i + " timestamp (CreateTime)");
            expected.computeIfAbsent(new TopicPartition(topic, o.partition()), k -> new HashMap<>()).put(m.offset(), o);
        }
        List<ConsumerRecord<byte[], byte[]>> got = Clients.readAll(strata.bootstrap(), topic, partitions);
        assertEquals(outs.size(), got.size(), "records read back");
        for (ConsumerRecord<byte[], byte[]> r : got) {
            Out o = expected.get(new TopicPartition(r.topic(), r.partition())).get(r.offset());
            String at = "record at " + r.partition() + "/" + r.offset();
            assertTrue(o != null, at + " was never acked");
            assertArrayEquals(o.key(), r.key(), at + " key");
            assertArrayEquals(o.value(), r.value(), at + " value");
            assertEquals(o.timestamp(), r.timestamp(), at + " timestamp");
            Header[] hs = r.headers().toArray();
            assertEquals(o.headers().size(), hs.length, at + " header count");
            for (int h = 0; h < hs.length; h++) {
                assertEquals(o.headers().get(h).key(), hs[h].key(), at + " header " + h + " key");
                assertArrayEquals(o.headers().get(h).value(), hs[h].value(), at + " header " + h + " value");
            }
        }
    }

    static byte[] randomBytes(Random rnd, int n) {
        byte[] b = new byte[n];
        rnd.nextBytes(b);
        return b;
    }

    /** Keys and values of every shape: null, empty, binary, compressible text; 0-3 headers. */
    static List<Out> records(long seed, int n, int partitions) {
        Random rnd = new Random(seed);
        List<Out> outs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            byte[] key = switch (i % 5) {
                case 0 -> null;
                case 1 -> new byte[0];
                default -> ("key-" + i).getBytes(StandardCharsets.UTF_8);
            };
            byte[] value = switch (i % 4) {
                case 0 -> randomBytes(rnd, rnd.nextInt(2000));
                case 1 -> ("value " + i + " ").repeat(1 + rnd.nextInt(50)).getBytes(StandardCharsets.UTF_8);
                case 2 -> new byte[0];
                default -> i % 8 == 3 ? null : randomBytes(rnd, 1 + rnd.nextInt(100));
            };
            List<Header> headers = new ArrayList<>();
            for (int h = 0; h < i % 4; h++) {
                headers.add(new RecordHeader("h" + h, h == 2 ? null : randomBytes(rnd, rnd.nextInt(20))));
            }
            outs.add(new Out(i % partitions, key, value, headers, BASE_TS + i));
        }
        return outs;
    }

    @Test
    void acksAllIdempotentProducerOffsetsAreDenseAndRecordsReadBackByteForByte() throws Exception {
        String topic = Clients.uniqueTopic("java-idem");
        Clients.createTopic(strata.bootstrap(), topic, 3);
        List<Out> outs = records(1, 600, 3);
        Properties props = Clients.producerProps(strata.bootstrap());
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "4096"); // many batches in flight at once
        List<RecordMetadata> acks = produce(props, topic, outs);
        checkRoundTrip(topic, 3, outs, acks);
        // no transactions: a read_committed consumer sees the same records
        Properties rc = new Properties();
        rc.put(org.apache.kafka.clients.consumer.ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        assertEquals(outs.size(), Clients.readAll(strata.bootstrap(), Clients.partitions(topic, 3), rc).size(),
                "records read with isolation.level=read_committed");
    }

    @ParameterizedTest(name = "acks={0}")
    @ValueSource(strings = {"0", "1"})
    void acksZeroAndOneRoundTrip(String acks) throws Exception {
        String topic = Clients.uniqueTopic("java-acks" + acks);
        Clients.createTopic(strata.bootstrap(), topic, 1);
        Properties props = Clients.producerProps(strata.bootstrap());
        props.put(ProducerConfig.ACKS_CONFIG, acks);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false"); // idempotence needs acks=all
        List<Out> outs = records(Long.parseLong(acks) + 100, 200, 1);
        List<RecordMetadata> acked = produce(props, topic, outs);
        if (acks.equals("0")) {
            // acks=0: the producer learns no offsets (Kafka reports -1); the log must still hold
            // every record in send order
            assertTrue(acked.stream().allMatch(m -> m.offset() == -1), "acks=0 reports offset -1");
            acked = new ArrayList<>();
            for (int i = 0; i < outs.size(); i++) {
                acked.add(new RecordMetadata(new TopicPartition(topic, 0), i, 0, outs.get(i).timestamp(), 0, 0));
            }
        }
        // acks=0 and acks=1 are answered before the fsync; the high watermark (what a consumer
        // sees) is the fsynced end, which reaches the last record at the next group commit
        // (docs/COMPATIBILITY.md, "acks=1 and the high watermark")
        Wait.untilTrue(Clients.TIMEOUT, "all 200 records below the high watermark", () -> endOffset(topic) == 200,
                () -> "end offset " + endOffset(topic));
        checkRoundTrip(topic, 1, outs, acked);
    }

    @ParameterizedTest(name = "compression.type={0}")
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void everyCompressionCodecRoundTrips(String codec) throws Exception {
        String topic = Clients.uniqueTopic("java-codec-" + codec);
        Clients.createTopic(strata.bootstrap(), topic, 2);
        List<Out> outs = records(codec.hashCode(), 800, 2);
        Properties props = Clients.producerProps(strata.bootstrap());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "65536");
        List<RecordMetadata> acks = produce(props, topic, outs);
        checkRoundTrip(topic, 2, outs, acks);
    }

    @Test
    void headersOfEveryShapeRoundTrip() throws Exception {
        String topic = Clients.uniqueTopic("java-headers");
        Clients.createTopic(strata.bootstrap(), topic, 1);
        byte[] binary = new byte[256];
        for (int i = 0; i < binary.length; i++) {
            binary[i] = (byte) i;
        }
        List<Out> outs = List.of(
                // duplicate keys, kept in order
                new Out(0, "k".getBytes(), "v".getBytes(), List.of(
                        new RecordHeader("dup", "first".getBytes()),
                        new RecordHeader("dup", "second".getBytes()),
                        new RecordHeader("dup", "third".getBytes())), BASE_TS),
                // null header value vs empty header value
                new Out(0, null, "v".getBytes(), List.of(
                        new RecordHeader("null-value", null),
                        new RecordHeader("empty-value", new byte[0])), BASE_TS + 1),
                // non-ASCII key, binary value, empty key
                new Out(0, new byte[0], null, List.of(
                        new RecordHeader("schlüssel-ключ-鍵", binary),
                        new RecordHeader("", "empty key".getBytes())), BASE_TS + 2),
                // many headers
                new Out(0, "many".getBytes(), new byte[0], manyHeaders(100), BASE_TS + 3));
        List<RecordMetadata> acks = produce(Clients.producerProps(strata.bootstrap()), topic, outs);
        checkRoundTrip(topic, 1, outs, acks);
        // and the Java consumer tells a null header value from an empty one
        List<ConsumerRecord<byte[], byte[]>> got = Clients.readAll(strata.bootstrap(), topic, 1);
        assertNull(got.get(1).headers().lastHeader("null-value").value(), "null header value");
        assertEquals(0, got.get(1).headers().lastHeader("empty-value").value().length, "empty header value");
    }

    static List<Header> manyHeaders(int n) {
        List<Header> hs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            hs.add(new RecordHeader("header-" + i, ("value-" + i).getBytes()));
        }
        return hs;
    }

    /** The length of a value that makes a one-record batch (null key, no headers, one record)
     *  exactly {@code batchBytes} long, as Kafka counts a batch for max.message.bytes
     *  (its sizeInBytes: the 61-byte batch header with the offset and length fields, plus
     *  the record). */
    static int valueSizeForBatch(int batchBytes) {
        for (int v = batchBytes - DefaultRecordBatch.RECORD_BATCH_OVERHEAD; v > 0; v--) {
            int size = DefaultRecordBatch.RECORD_BATCH_OVERHEAD + DefaultRecord.sizeInBytes(0, 0L, -1, v, new Header[0]);
            if (size == batchBytes) {
                return v;
            }
            if (size < batchBytes) {
                break;
            }
        }
        throw new IllegalArgumentException("no value size gives a batch of exactly " + batchBytes + " bytes");
    }

    /** A producer that lets records up to 4 MiB through, so the broker's limit is what is tested. */
    static Properties bigRecordProducer() {
        Properties props = Clients.producerProps(strata.bootstrap());
        props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(4 << 20));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        return props;
    }

    static Out bigRecord(int valueSize, long seed) {
        return new Out(0, null, randomBytes(new Random(seed), valueSize), List.of(), BASE_TS);
    }

    static long endOffset(String topic) {
        try (var c = Clients.consumer(Clients.consumerProps(strata.bootstrap(), null))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            return c.endOffsets(List.of(tp), Clients.TIMEOUT).get(tp);
        }
    }

    /** Sends one record; returns the cause of its failure (fails the test if it was acked). */
    static Throwable sendExpectingFailure(Properties props, String topic, Out o) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(props)) {
            Future<RecordMetadata> f = p.send(o.toRecord(topic));
            try {
                RecordMetadata m = f.get(60, TimeUnit.SECONDS);
                return fail("a " + o.value().length + "-byte record was acked at offset " + m.offset()
                        + "; expected RecordTooLargeException (MESSAGE_TOO_LARGE)");
            } catch (ExecutionException e) {
                return e.getCause();
            }
        }
    }

    @Test
    void batchOfExactlyDefaultMaxMessageBytesIsAcceptedAndReadBack() throws Exception {
        String topic = Clients.uniqueTopic("java-maxsize");
        Clients.createTopic(strata.bootstrap(), topic, 1);
        int v = valueSizeForBatch(DEFAULT_MAX_MESSAGE_BYTES);
        Out o = bigRecord(v, 7);
        List<RecordMetadata> acks = produce(bigRecordProducer(), topic, List.of(o));
        // the consumer's max.partition.fetch.bytes (1 MiB) is smaller than this batch: the first
        // batch must be returned anyway (KIP-74)
        checkRoundTrip(topic, 1, List.of(o), acks);
    }

    @Test
    void batchOneByteOverDefaultMaxMessageBytesGetsRecordTooLarge() throws Exception {
        String topic = Clients.uniqueTopic("java-toolarge");
        Clients.createTopic(strata.bootstrap(), topic, 1);
        int v = valueSizeForBatch(DEFAULT_MAX_MESSAGE_BYTES + 1);
        Throwable cause = sendExpectingFailure(bigRecordProducer(), topic, bigRecord(v, 8));
        assertInstanceOf(RecordTooLargeException.class, cause, "broker's answer to a batch over max.message.bytes");
        assertEquals(0L, endOffset(topic), "nothing was appended");
        // the partition still takes records
        Out small = new Out(0, "k".getBytes(), "after".getBytes(), List.of(), BASE_TS);
        List<RecordMetadata> acks = produce(Clients.producerProps(strata.bootstrap()), topic, List.of(small));
        checkRoundTrip(topic, 1, List.of(small), acks);
    }

    @Test
    void topicMaxMessageBytesIsEnforced() throws Exception {
        String topic = Clients.uniqueTopic("java-topiclimit");
        int limit = 20_000;
        try (Admin a = Clients.admin(strata.bootstrap())) {
            Clients.createTopic(a, topic, 1, 1, Map.of("max.message.bytes", String.valueOf(limit)));
        }
        Out atLimit = bigRecord(valueSizeForBatch(limit), 9);
        List<RecordMetadata> acks = produce(bigRecordProducer(), topic, List.of(atLimit));
        Throwable cause = sendExpectingFailure(bigRecordProducer(), topic, bigRecord(valueSizeForBatch(limit + 1), 10));
        assertInstanceOf(RecordTooLargeException.class, cause, "a batch one byte over the topic's max.message.bytes");
        checkRoundTrip(topic, 1, List.of(atLimit), acks);
    }
}
