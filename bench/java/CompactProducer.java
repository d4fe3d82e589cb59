// The official Java client, for bench/compact_vs_broker.py: produces one keyed topic to
// compact (the Python client is too slow for 10^6-10^7 messages). Compiled by the bench
// against the sandbox's jars (scripts/sandbox classpath).
//
// Usage: CompactProducer SERVICE_URL VALUE_SIZE BATCH TOMBSTONE_PERCENT VALUES KEY_SIZE SEED
//                        KEY_DRAW (TOPIC MESSAGES KEYS COMPRESSION)...
// producing each topic in turn with one client (a JVM start costs seconds) and printing one
// JSON document per topic on stdout, on a line of its own after "COMPACTPRODUCER ".
//
//   Message i has the key "k" + a key number: KEY_DRAW "uniform" draws it uniformly from
//   [0, KEYS) (java.util.Random seeded with SEED for each topic), "cycle" is i mod KEYS
//   (every key once before any repeats: MESSAGES >= KEYS gives KEYS distinct keys), left-padded with zeros to KEY_SIZE characters when
//   KEY_SIZE is larger; TOMBSTONE_PERCENT of the messages (drawn from the same generator)
//   are tombstones (an empty value), the others VALUE_SIZE bytes: VALUES "random" (random
//   bytes: batches do not compress) or "text" (the message number and the key in readable
//   text, repeated: batches compress well, which is what makes the 4.0.7 broker's
//   compaction of compressed batches fail, apache/pulsar#26290). Batches are cut at BATCH
//   messages (a publish delay of a second and 4 MiB: only the count cuts them, except the
//   last), compressed with COMPRESSION (NONE, LZ4, ZLIB, ZSTD, SNAPPY). Sends are
//   asynchronous with at most 50,000 messages pending. Prints {"topic", "messages",
//   "tombstones", "seconds", "last_message_id"} per topic.

import java.nio.charset.StandardCharsets;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;

public final class CompactProducer {
    public static void main(String[] args) throws Exception {
        if (args.length < 12 || (args.length - 8) % 4 != 0) {
            System.err.println("usage: CompactProducer SERVICE_URL VALUE_SIZE BATCH"
                    + " TOMBSTONE_PERCENT VALUES KEY_SIZE SEED KEY_DRAW"
                    + " (TOPIC MESSAGES KEYS COMPRESSION)...");
            System.exit(2);
        }
        int valueSize = Integer.parseInt(args[1]);
        int batch = Integer.parseInt(args[2]);
        double tombstones = Double.parseDouble(args[3]) / 100.0;
        boolean text = args[4].equals("text");
        int keySize = Integer.parseInt(args[5]);
        long seed = Long.parseLong(args[6]);
        boolean cycle = args[7].equals("cycle");
        try (PulsarClient client = PulsarClient.builder()
                .serviceUrl(args[0])
                .operationTimeout(120, TimeUnit.SECONDS)
                .build()) {
            for (int at = 8; at < args.length; at += 4) {
                produce(client, args[at], Long.parseLong(args[at + 1]), Integer.parseInt(args[at + 2]),
                        CompressionType.valueOf(args[at + 3]), valueSize, batch, tombstones, text,
                        keySize, cycle, new Random(seed));
            }
        }
    }

    static void produce(PulsarClient client, String topic, long messages, int keys,
            CompressionType compression, int valueSize, int batch, double tombstones,
            boolean text, int keySize, boolean cycle, Random rnd) throws Exception {
        long start = System.nanoTime();
        long tombs = 0;
        AtomicReference<Throwable> failed = new AtomicReference<>(null);
        CompletableFuture<MessageId> last = null;
        try (Producer<byte[]> producer = client.newProducer()
                .topic(topic)
                .enableBatching(true)
                .batchingMaxMessages(batch)
                .batchingMaxBytes(4 * 1024 * 1024)
                .batchingMaxPublishDelay(1, TimeUnit.SECONDS)
                .compressionType(compression)
                .blockIfQueueFull(true)
                .maxPendingMessages(50_000)
                .sendTimeout(0, TimeUnit.SECONDS)
                .create()) {
            byte[] random = new byte[valueSize];
            StringBuilder sb = new StringBuilder(valueSize + 64);
            for (long i = 0; i < messages; i++) {
                if (failed.get() != null) {
                    break;
                }
                String key = Long.toString(cycle ? i % keys : rnd.nextInt(keys));
                if (key.length() + 1 < keySize) {
                    key = "0".repeat(keySize - 1 - key.length()) + key;
                }
                key = "k" + key;
                byte[] value;
                if (rnd.nextDouble() < tombstones) {
                    value = new byte[0];
                    tombs++;
                } else if (text) {
                    sb.setLength(0);
                    while (sb.length() < valueSize) {
                        sb.append("message ").append(i).append(" of key ").append(key).append("; ");
                    }
                    value = sb.substring(0, valueSize).getBytes(StandardCharsets.US_ASCII);
                } else {
                    rnd.nextBytes(random);
                    value = random.clone();
                }
                last = producer.newMessage().key(key).value(value).sendAsync();
                last.whenComplete((id, err) -> {
                    if (err != null) {
                        failed.compareAndSet(null, err);
                    }
                });
            }
            producer.flush();
            if (failed.get() != null) {
                throw new RuntimeException("a send to " + topic + " failed", failed.get());
            }
            MessageId id = last == null ? null : last.get(120, TimeUnit.SECONDS);
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("COMPACTPRODUCER {\"topic\": \"" + topic + "\", \"messages\": "
                    + messages + ", \"tombstones\": " + tombs + ", \"seconds\": " + seconds
                    + ", \"last_message_id\": \"" + id + "\"}");
        }
    }
}
