// The official Java client, for bench/compact_vs_broker.py: produces one keyed topic to
// compact (the Python client is too slow for 10^6-10^7 messages). Compiled by the bench
// against the sandbox's jars (scripts/sandbox classpath).
//
// Usage: CompactProducer SERVICE_URL TOPIC MESSAGES KEYS VALUE_SIZE BATCH TOMBSTONE_PERCENT
//                        COMPRESSION VALUES KEY_SIZE SEED
// printing one JSON document on stdout, on a line of its own after "COMPACTPRODUCER ".
//
//   Message i has the key "k" + a key number drawn uniformly from [0, KEYS) (java.util.Random
//   seeded with SEED), left-padded with zeros to KEY_SIZE characters when KEY_SIZE is larger;
//   TOMBSTONE_PERCENT of the messages (drawn from the same generator) are tombstones (an
//   empty value), the others VALUE_SIZE bytes: VALUES "random" (random bytes: batches do
//   not compress) or "text" (the message number and the key in readable text, repeated:
//   batches compress well, which is what makes the 4.0.7 broker's compaction of LZ4 batches
//   fail, apache/pulsar#26290). Batches are cut at BATCH messages (a publish delay of a
//   second and 4 MiB: only the count cuts them, except the last), compressed with
//   COMPRESSION (NONE, LZ4, ZLIB, ZSTD, SNAPPY). Sends are asynchronous with at most
//   50,000 messages pending. Prints {"messages", "tombstones", "seconds", "last_message_id"}.

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
        if (args.length != 11) {
            System.err.println("usage: CompactProducer SERVICE_URL TOPIC MESSAGES KEYS VALUE_SIZE"
                    + " BATCH TOMBSTONE_PERCENT COMPRESSION VALUES KEY_SIZE SEED");
            System.exit(2);
        }
        String url = args[0];
        String topic = args[1];
        long messages = Long.parseLong(args[2]);
        int keys = Integer.parseInt(args[3]);
        int valueSize = Integer.parseInt(args[4]);
        int batch = Integer.parseInt(args[5]);
        double tombstones = Double.parseDouble(args[6]) / 100.0;
        CompressionType compression = CompressionType.valueOf(args[7]);
        boolean text = args[8].equals("text");
        int keySize = Integer.parseInt(args[9]);
        Random rnd = new Random(Long.parseLong(args[10]));
        long start = System.nanoTime();
        long tombs = 0;
        AtomicReference<Throwable> failed = new AtomicReference<>(null);
        CompletableFuture<MessageId> last = null;
        try (PulsarClient client = PulsarClient.builder()
                .serviceUrl(url)
                .operationTimeout(120, TimeUnit.SECONDS)
                .build();
             Producer<byte[]> producer = client.newProducer()
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
                String key = Integer.toString(rnd.nextInt(keys));
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
                throw new RuntimeException("a send failed", failed.get());
            }
            MessageId id = last == null ? null : last.get(120, TimeUnit.SECONDS);
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("COMPACTPRODUCER {\"messages\": " + messages + ", \"tombstones\": "
                    + tombs + ", \"seconds\": " + seconds + ", \"last_message_id\": \""
                    + id + "\"}");
        }
    }
}
