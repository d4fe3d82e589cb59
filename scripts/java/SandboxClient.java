// The official Java client, for what the Python client (pulsar-client on PyPI) cannot do:
// transactions, chunking with message ids, encryption with keys in files. Compiled by
// scripts/sandbox (`scripts/sandbox client`, and the test fixture through the same code)
// against the sandbox's own jars and run against the sandbox's broker on loopback.
//
// Usage: SandboxClient SERVICE_URL COMMAND < SPEC.json, printing one JSON document.
//
//   produce       spec {"topic": T, "messages": [{"key": K | null, "value": BASE64}],
//                 "batching": bool, "chunk_max_bytes": N (chunking on: a message larger
//                 than N bytes goes in chunks of N; batching must be off),
//                 "encryption_key": {"name": NAME, "public_key": PEM_FILE},
//                 "compression": NONE | LZ4 | ZLIB | ZSTD | SNAPPY, "batch_max_messages": N
//                 (batching on, batches cut at N messages: a publish delay of a second)}:
//                 one producer sends the messages in order. Prints {"topic": T, "message_ids":
//                 ["L:E:B:P", ...] (a chunked message: its last chunk's id, as the client
//                 gives it), "first_chunk_ids": ["L:E:B:P" | null, ...], "keys": [...]}.
//   gen-keys      spec {"public_key": FILE, "private_key": FILE}: an RSA key pair for
//                 message encryption (PEM: X.509 public, PKCS#8 private, owner-only),
//                 written to the files and never printed. Prints {"public_key": FILE,
//                 "private_key": FILE}. No Pulsar client is made.
//   consume       spec {"topic": T, "subscription": S, "count": N, "private_key": FILE
//                 (optional: decrypts with it), "read_compacted": bool, "all": bool}: a
//                 consumer of S from the earliest message receives N messages (with "all":
//                 a reader named S reads from the earliest message until the broker has no
//                 more for it, hasMessageAvailable; "read_compacted": the compacted view, in
//                 which the Java client skips the compacted-out placeholders of a batch).
//                 Prints {"messages": [{"message_id", "key", "value": BASE64}]}.
//   txn-produce   spec {"topic": T, "batching": bool, "batch_delay_ms": N (batching: the
//                 messages of a transaction, sent at once, go in one batch when N is longer
//                 than sending them takes; flush() does not cut a transaction's batch short),
//                 "transactions": [{"end": "commit" |
//                 "abort" | "open", "messages": [{"key": K, "value": BASE64 | null}]}]}
//                 null values are tombstones (an empty payload). "open" transactions are
//                 left open (their timeout is the spec's "timeout_ms", default 10 min).
//                 Prints {"transactions": [{"id": "most:least", "end": E,
//                 "message_ids": ["L:E:B:P", ...]}]}.
//   txn-ack       spec {"topic": T, "subscription": S, "transactions": [{"end": "commit" |
//                 "abort" | "open", "count": N}]}: a consumer of S (from the earliest
//                 message) receives N messages per transaction and acknowledges each in it,
//                 which makes the broker's pending-ack store of T and S
//                 (T-S__transaction_pending_ack). Prints {"transactions": [{"id":
//                 "most:least", "end": E, "message_ids": ["L:E:B:P", ...]}]}.
//   batch         spec {"commands": [{"command": C, "spec": S}, ...]}: the commands above that
//                 take a client, one after the other in this one JVM and client (each JVM
//                 start costs seconds). Prints {"results": [what each printed, ...]}.
//   last-message-id   spec {"topic": T, "read_compacted": bool}: a consumer's
//                 getLastMessageId(), printed as {"message_id": "L:E:B:P"}.
//   bk-read       spec {"metadata_service_uri": URI, "ledger_id": L, "password": BASE64,
//                 "recovery": bool}: BookKeeper's own client opens the ledger with that
//                 password (the open fails when it does not match the ledger's) and reads
//                 every entry. Prints {"ledger_id", "state", "ensemble_size",
//                 "write_quorum_size", "ack_quorum_size", "digest_type", "last_entry_id",
//                 "length", "ensembles": {"FIRST": [bookie, ...]}, "custom_metadata":
//                 {K: BASE64}, "entries": [BASE64, ...]}. No Pulsar client is made.
//   schema-produce, schema-consume, schema-admin-get   messages with schemas and what
//                 pulsar-admin prints of them: see SchemaClient.java.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Base64;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionMode;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.impl.BatchMessageIdImpl;
import org.apache.pulsar.client.impl.MessageIdImpl;

public final class SandboxClient {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: SandboxClient SERVICE_URL COMMAND < SPEC.json");
            System.exit(2);
        }
        JsonNode spec = JSON.readTree(System.in);
        ObjectNode out;
        if (args[1].equals("bk-read")) {
            System.out.println(JSON.writeValueAsString(bkRead(spec)));
            return;
        }
        if (args[1].equals("gen-keys")) {
            System.out.println(JSON.writeValueAsString(genKeys(spec)));
            return;
        }
        try (PulsarClient client = PulsarClient.builder()
                .serviceUrl(args[0])
                .enableTransaction(true)
                .operationTimeout(60, TimeUnit.SECONDS)
                .build()) {
            if (args[1].equals("batch")) {
                out = JSON.createObjectNode();
                ArrayNode results = out.putArray("results");
                for (JsonNode c : spec.get("commands")) {
                    results.add(run(client, c.get("command").asText(), c.get("spec")));
                }
            } else {
                out = run(client, args[1], spec);
            }
        }
        System.out.println(JSON.writeValueAsString(out));
    }

    static ObjectNode run(PulsarClient client, String command, JsonNode spec) throws Exception {
        return switch (command) {
            case "produce" -> produce(client, spec);
            case "consume" -> consume(client, spec);
            case "txn-produce" -> txnProduce(client, spec);
            case "txn-ack" -> txnAck(client, spec);
            case "last-message-id" -> lastMessageId(client, spec);
            case "schema-produce" -> SchemaClient.produce(client, spec);
            case "schema-consume" -> SchemaClient.consume(client, spec);
            case "schema-admin-get" -> SchemaClient.adminGet(spec);
            default -> throw new IllegalArgumentException("unknown command " + command);
        };
    }

    static String id(MessageId messageId) {
        MessageIdImpl m = (MessageIdImpl) messageId;
        int batch = m instanceof BatchMessageIdImpl b ? b.getBatchIndex() : -1;
        return m.getLedgerId() + ":" + m.getEntryId() + ":" + batch + ":" + m.getPartitionIndex();
    }

    static ObjectNode produce(PulsarClient client, JsonNode spec) throws Exception {
        ObjectNode out = JSON.createObjectNode();
        String topic = spec.get("topic").asText();
        out.put("topic", topic);
        var builder = client.newProducer()
                .topic(topic)
                .enableBatching(spec.path("batching").asBoolean(false))
                .sendTimeout(0, TimeUnit.SECONDS);
        if (spec.hasNonNull("compression")) {
            builder.compressionType(
                    org.apache.pulsar.client.api.CompressionType.valueOf(spec.get("compression").asText()));
        }
        if (spec.hasNonNull("batch_max_messages")) {  // only the count cuts the batches
            builder.enableBatching(true)
                    .batchingMaxMessages(spec.get("batch_max_messages").asInt())
                    .batchingMaxBytes(4 * 1024 * 1024)
                    .batchingMaxPublishDelay(1, TimeUnit.SECONDS);
        }
        if (spec.hasNonNull("chunk_max_bytes")) {
            builder.enableBatching(false)
                    .enableChunking(true)
                    .chunkMaxMessageSize(spec.get("chunk_max_bytes").asInt());
        }
        JsonNode key = spec.path("encryption_key");
        if (!key.isMissingNode() && !key.isNull()) {
            builder.addEncryptionKey(key.get("name").asText())
                    .cryptoKeyReader(org.apache.pulsar.client.impl.DefaultCryptoKeyReader.builder()
                            .publicKey(key.get("name").asText(),
                                    "file://" + key.get("public_key").asText())
                            .build());
        }
        ArrayNode ids = out.putArray("message_ids");
        ArrayNode firsts = out.putArray("first_chunk_ids");
        ArrayNode keys = out.putArray("keys");
        try (Producer<byte[]> producer = builder.create()) {
            java.util.List<java.util.concurrent.CompletableFuture<MessageId>> sent =
                    new java.util.ArrayList<>();
            for (JsonNode m : spec.get("messages")) {
                TypedMessageBuilder<byte[]> b = producer.newMessage();
                if (m.hasNonNull("key")) {
                    b.key(m.get("key").asText());
                    keys.add(m.get("key").asText());
                } else {
                    keys.addNull();
                }
                b.value(Base64.getDecoder().decode(m.get("value").asText()));
                sent.add(b.sendAsync());
            }
            producer.flush();
            for (var f : sent) {
                MessageId got = f.get(60, TimeUnit.SECONDS);
                if (got instanceof org.apache.pulsar.client.impl.ChunkMessageIdImpl c) {
                    ids.add(id(c.getLastChunkMessageId()));
                    firsts.add(id(c.getFirstChunkMessageId()));
                } else {
                    ids.add(id(got));
                    firsts.addNull();
                }
            }
        }
        return out;
    }

    static ObjectNode consume(PulsarClient client, JsonNode spec) throws Exception {
        if (spec.path("all").asBoolean(false)) {
            return readAll(client, spec);
        }
        ObjectNode out = JSON.createObjectNode();
        var builder = client.newConsumer()
                .readCompacted(spec.path("read_compacted").asBoolean(false))
                .topic(spec.get("topic").asText())
                .subscriptionName(spec.get("subscription").asText())
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest);
        if (spec.hasNonNull("private_key")) {
            builder.cryptoKeyReader(org.apache.pulsar.client.impl.DefaultCryptoKeyReader.builder()
                    .defaultPrivateKey("file://" + spec.get("private_key").asText())
                    .build());
        }
        ArrayNode messages = out.putArray("messages");
        try (Consumer<byte[]> consumer = builder.subscribe()) {
            for (int i = 0; i < spec.get("count").asInt(); i++) {
                org.apache.pulsar.client.api.Message<byte[]> m = consumer.receive(60, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("no message within 60 s");
                }
                record(messages, m);
                consumer.acknowledge(m);
            }
        }
        return out;
    }

    /** One message as the tests compare it: its id, its key (or null) and its value in base64. */
    static void record(ArrayNode messages, org.apache.pulsar.client.api.Message<byte[]> m) {
        ObjectNode record = messages.addObject();
        record.put("message_id", id(m.getMessageId()));
        if (m.hasKey()) {
            record.put("key", m.getKey());
        } else {
            record.putNull("key");
        }
        record.put("value", Base64.getEncoder().encodeToString(m.getValue()));
    }

    static ObjectNode readAll(PulsarClient client, JsonNode spec) throws Exception {
        ObjectNode out = JSON.createObjectNode();
        var builder = client.newReader()
                .topic(spec.get("topic").asText())
                .subscriptionName(spec.get("subscription").asText())
                .startMessageId(MessageId.earliest)
                .readCompacted(spec.path("read_compacted").asBoolean(false));
        if (spec.hasNonNull("private_key")) {
            builder.cryptoKeyReader(org.apache.pulsar.client.impl.DefaultCryptoKeyReader.builder()
                    .defaultPrivateKey("file://" + spec.get("private_key").asText())
                    .build());
        }
        ArrayNode messages = out.putArray("messages");
        try (org.apache.pulsar.client.api.Reader<byte[]> reader = builder.create()) {
            while (reader.hasMessageAvailable()) {
                org.apache.pulsar.client.api.Message<byte[]> m = reader.readNext(60, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("a message was available, none came within 60 s");
                }
                record(messages, m);
            }
        }
        return out;
    }

    static ObjectNode genKeys(JsonNode spec) throws Exception {
        java.security.KeyPairGenerator gen = java.security.KeyPairGenerator.getInstance("RSA");
        gen.initialize(2048);
        java.security.KeyPair pair = gen.generateKeyPair();
        java.nio.file.Path pub = java.nio.file.Path.of(spec.get("public_key").asText());
        java.nio.file.Path priv = java.nio.file.Path.of(spec.get("private_key").asText());
        writePem(priv, "PRIVATE KEY", pair.getPrivate().getEncoded());
        writePem(pub, "PUBLIC KEY", pair.getPublic().getEncoded());
        ObjectNode out = JSON.createObjectNode();
        out.put("public_key", pub.toString());
        out.put("private_key", priv.toString());
        return out;
    }

    static void writePem(java.nio.file.Path path, String type, byte[] der) throws Exception {
        String body = Base64.getMimeEncoder(64, "\n".getBytes()).encodeToString(der);
        String text = "-----BEGIN " + type + "-----\n" + body + "\n-----END " + type + "-----\n";
        java.nio.file.Files.deleteIfExists(path);
        java.nio.file.Files.createFile(path, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
        java.nio.file.Files.writeString(path, text);
    }

    static ObjectNode txnProduce(PulsarClient client, JsonNode spec) throws Exception {
        long timeout = spec.path("timeout_ms").asLong(600_000);
        ObjectNode out = JSON.createObjectNode();
        ArrayNode txns = out.putArray("transactions");
        var builder = client.newProducer()
                .topic(spec.get("topic").asText())
                .enableBatching(spec.path("batching").asBoolean(false))
                .sendTimeout(0, TimeUnit.SECONDS);
        if (spec.has("batch_delay_ms")) {  // else the client's 1 ms: batches are cut anywhere
            builder.batchingMaxPublishDelay(spec.get("batch_delay_ms").asLong(), TimeUnit.MILLISECONDS);
        }
        try (Producer<byte[]> producer = builder.create()) {
            for (JsonNode t : spec.get("transactions")) {
                String end = t.get("end").asText();
                Transaction txn = begin(client, timeout);
                ArrayNode ids = recorded(txns, txn, end);
                java.util.List<java.util.concurrent.CompletableFuture<MessageId>> sent =
                        new java.util.ArrayList<>();
                for (JsonNode m : t.get("messages")) {
                    TypedMessageBuilder<byte[]> b = producer.newMessage(txn);
                    if (m.hasNonNull("key")) {
                        b.key(m.get("key").asText());
                    }
                    JsonNode v = m.get("value");
                    b.value(v == null || v.isNull() ? new byte[0] : Base64.getDecoder().decode(v.asText()));
                    sent.add(b.sendAsync());
                }
                producer.flush();
                for (var f : sent) {
                    ids.add(id(f.get(60, TimeUnit.SECONDS)));
                }
                end(txn, end);
            }
        }
        return out;
    }

    /** A new transaction of txn-produce and txn-ack, timing out after timeoutMs. */
    static Transaction begin(PulsarClient client, long timeoutMs) throws Exception {
        return client.newTransaction()
                .withTransactionTimeout(timeoutMs, TimeUnit.MILLISECONDS)
                .build()
                .get();
    }

    /** The transaction's record in the output (its id and how it ends); its message ids go
     *  in the array returned. */
    static ArrayNode recorded(ArrayNode txns, Transaction txn, String end) {
        ObjectNode record = txns.addObject();
        record.put("id", txn.getTxnID().getMostSigBits() + ":" + txn.getTxnID().getLeastSigBits());
        record.put("end", end);
        return record.putArray("message_ids");
    }

    /** Ends a transaction as its spec says: commit, abort, or open (left for the
     *  coordinator's timeout). */
    static void end(Transaction txn, String end) throws Exception {
        switch (end) {
            case "commit" -> txn.commit().get();
            case "abort" -> txn.abort().get();
            case "open" -> { }
            default -> throw new IllegalArgumentException("unknown end " + end);
        }
    }

    static ObjectNode txnAck(PulsarClient client, JsonNode spec) throws Exception {
        long timeout = spec.path("timeout_ms").asLong(600_000);
        ObjectNode out = JSON.createObjectNode();
        ArrayNode txns = out.putArray("transactions");
        try (Consumer<byte[]> consumer = client.newConsumer()
                .topic(spec.get("topic").asText())
                .subscriptionName(spec.get("subscription").asText())
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (JsonNode t : spec.get("transactions")) {
                String end = t.get("end").asText();
                Transaction txn = begin(client, timeout);
                ArrayNode ids = recorded(txns, txn, end);
                for (int i = 0; i < t.get("count").asInt(); i++) {
                    org.apache.pulsar.client.api.Message<byte[]> m = consumer.receive(60, TimeUnit.SECONDS);
                    if (m == null) {
                        throw new IllegalStateException("no message to acknowledge within 60 s");
                    }
                    consumer.acknowledgeAsync(m.getMessageId(), txn).get(60, TimeUnit.SECONDS);
                    ids.add(id(m.getMessageId()));
                }
                end(txn, end);
            }
        }
        return out;
    }

    static ObjectNode lastMessageId(PulsarClient client, JsonNode spec) throws Exception {
        ObjectNode out = JSON.createObjectNode();
        // a non-durable subscription leaves no cursor behind; GetLastMessageId is the
        // command a reader of the topic sends (the compacted view when read_compacted)
        try (Consumer<byte[]> consumer = client.newConsumer()
                .topic(spec.get("topic").asText())
                .subscriptionName("ledgerctl-last-message-id")
                .subscriptionMode(SubscriptionMode.NonDurable)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .readCompacted(spec.path("read_compacted").asBoolean(false))
                .subscribe()) {
            out.put("message_id", id(consumer.getLastMessageId()));
        }
        return out;
    }

    static ObjectNode bkRead(JsonNode spec) throws Exception {
        org.apache.bookkeeper.conf.ClientConfiguration conf =
                new org.apache.bookkeeper.conf.ClientConfiguration();
        conf.setMetadataServiceUri(spec.get("metadata_service_uri").asText());
        conf.setEnableDigestTypeAutodetection(true);
        byte[] password = Base64.getDecoder().decode(spec.path("password").asText(""));
        ObjectNode out = JSON.createObjectNode();
        try (org.apache.bookkeeper.client.api.BookKeeper bk =
                org.apache.bookkeeper.client.api.BookKeeper.newBuilder(conf).build();
             org.apache.bookkeeper.client.api.ReadHandle handle = bk.newOpenLedgerOp()
                     .withLedgerId(spec.get("ledger_id").asLong())
                     .withPassword(password)
                     .withDigestType(org.apache.bookkeeper.client.api.DigestType.CRC32C)
                     .withRecovery(spec.path("recovery").asBoolean(false))
                     .execute()
                     .get(60, TimeUnit.SECONDS)) {
            org.apache.bookkeeper.client.api.LedgerMetadata md = handle.getLedgerMetadata();
            out.put("ledger_id", handle.getId());
            out.put("state", md.getState().toString());
            out.put("ensemble_size", md.getEnsembleSize());
            out.put("write_quorum_size", md.getWriteQuorumSize());
            out.put("ack_quorum_size", md.getAckQuorumSize());
            out.put("digest_type", md.getDigestType().toString());
            out.put("last_entry_id", md.getLastEntryId());
            out.put("length", md.getLength());
            ObjectNode ensembles = out.putObject("ensembles");
            md.getAllEnsembles().forEach((first, bookies) -> {
                ArrayNode list = ensembles.putArray(String.valueOf(first));
                bookies.forEach(b -> list.add(b.toString()));
            });
            ObjectNode custom = out.putObject("custom_metadata");
            md.getCustomMetadata().forEach(
                    (k, v) -> custom.put(k, Base64.getEncoder().encodeToString(v)));
            ArrayNode entries = out.putArray("entries");
            long last = handle.getLastAddConfirmed();
            for (long from = 0; from <= last; from += 1000) {
                long to = Math.min(last, from + 999);
                try (org.apache.bookkeeper.client.api.LedgerEntries got =
                        handle.read(from, to)) {
                    for (org.apache.bookkeeper.client.api.LedgerEntry e : got) {
                        entries.add(Base64.getEncoder().encodeToString(e.getEntryBytes()));
                    }
                }
            }
        }
        return out;
    }
}
