// The official Java client producing and consuming messages with schemas, for the tests of
// ledgerctl's decoded values (SandboxClient's schema-produce and schema-consume commands).
//
//   schema-produce  spec {"topic": T, "batching": bool, "schema": S,
//                   "messages": [{"key": K | null, "value": V}]}
//                   S = {"type": "AVRO" | "JSON", "definition": AVRO_SCHEMA_JSON}: V is
//                       the value in Avro's JSON encoding (unions as {"type": value}),
//                       written by Apache Avro's writer and sent by AUTO_PRODUCE_BYTES with
//                       the schema (the client checks the bytes against it);
//                     | {"type": "PROTOBUF" | "PROTOBUF_NATIVE"}: V is the JSON of the
//                       broker's own SchemaRegistryFormat.SchemaInfo message (a generated
//                       protobuf class on the sandbox's class path), sent with
//                       ProtobufSchema / ProtobufNativeSchema of that class;
//                     | {"type": "KEY_VALUE", "key": S, "value": S, "encoding": "INLINE" |
//                       "SEPARATED"}: V is {"key": .., "value": ..} of primitive schemas;
//                     | {"type": PRIMITIVE}: STRING, BOOLEAN, INT8..INT64, FLOAT, DOUBLE,
//                       BYTES (base64), DATE, TIME, TIMESTAMP (epoch ms), INSTANT,
//                       LOCAL_DATE, LOCAL_TIME, LOCAL_DATE_TIME (ISO-8601 text).
//                   Prints {"message_ids": ["L:E:B:P", ...]}.
//                   A spec {"all": [SPEC, ...]} does each in turn and prints {"all": [..]}.
//   schema-consume  spec {"topic": T, "count": N, "schema": {"type": "PROTOBUF"} | absent}:
//                   reads the first N messages with AUTO_CONSUME (the writer's schema of
//                   each message's version), or the PROTOBUF class, and prints
//                   {"messages": [{"message_id": .., "schema_version": V, "value": JSON}]}.
//   schema-admin-get spec {"web_url": URL, "topic": T}: what `pulsar-admin schemas get`
//                   prints, by the admin client calls it makes (CmdSchemas.GetSchema):
//                   {"latest": getSchemaInfoWithVersion(T).toString(), "versions":
//                   {"V": getSchemaInfo(T, V).toString(), ...}} for every version V;
//                   {"web_url": URL, "topics": [T, ...]} prints {"all": [...]}.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.DecoderFactory;
import org.apache.pulsar.broker.service.schema.proto.SchemaRegistryFormat;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.common.schema.SchemaInfoWithVersion;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionMode;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.client.api.schema.Field;
import org.apache.pulsar.client.impl.schema.ProtobufNativeSchema;
import org.apache.pulsar.client.impl.schema.ProtobufSchema;
import org.apache.pulsar.client.impl.schema.SchemaInfoImpl;
import org.apache.pulsar.client.impl.schema.generic.GenericJsonRecord;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;

final class SchemaClient {
    private static final ObjectMapper JSON = new ObjectMapper();

    private SchemaClient() {}

    static SchemaInfo structInfo(JsonNode schema) {
        return SchemaInfoImpl.builder()
                .name("")
                .type(SchemaType.valueOf(schema.get("type").asText()))
                .schema(schema.get("definition").asText().getBytes(StandardCharsets.UTF_8))
                .properties(Map.of())
                .build();
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    static Schema primitive(String type) {
        return switch (type) {
            case "STRING" -> Schema.STRING;
            case "BOOLEAN" -> Schema.BOOL;
            case "INT8" -> Schema.INT8;
            case "INT16" -> Schema.INT16;
            case "INT32" -> Schema.INT32;
            case "INT64" -> Schema.INT64;
            case "FLOAT" -> Schema.FLOAT;
            case "DOUBLE" -> Schema.DOUBLE;
            case "BYTES" -> Schema.BYTES;
            case "DATE" -> Schema.DATE;
            case "TIME" -> Schema.TIME;
            case "TIMESTAMP" -> Schema.TIMESTAMP;
            case "INSTANT" -> Schema.INSTANT;
            case "LOCAL_DATE" -> Schema.LOCAL_DATE;
            case "LOCAL_TIME" -> Schema.LOCAL_TIME;
            case "LOCAL_DATE_TIME" -> Schema.LOCAL_DATE_TIME;
            default -> throw new IllegalArgumentException("not a primitive schema: " + type);
        };
    }

    static Object primitiveValue(String type, JsonNode v) {
        if (v == null || v.isNull()) {
            return null;
        }
        return switch (type) {
            case "STRING" -> v.asText();
            case "BOOLEAN" -> v.asBoolean();
            case "INT8" -> (byte) v.asInt();
            case "INT16" -> (short) v.asInt();
            case "INT32" -> v.asInt();
            case "INT64" -> v.asLong();
            case "FLOAT" -> (float) v.asDouble();
            case "DOUBLE" -> v.asDouble();
            case "BYTES" -> Base64.getDecoder().decode(v.asText());
            case "DATE" -> new java.util.Date(v.asLong());
            case "TIME" -> new java.sql.Time(v.asLong());
            case "TIMESTAMP" -> new java.sql.Timestamp(v.asLong());
            case "INSTANT" -> Instant.parse(v.asText());
            case "LOCAL_DATE" -> LocalDate.parse(v.asText());
            case "LOCAL_TIME" -> LocalTime.parse(v.asText());
            case "LOCAL_DATE_TIME" -> LocalDateTime.parse(v.asText());
            default -> throw new IllegalArgumentException("not a primitive schema: " + type);
        };
    }

    static byte[] avroBytes(JsonNode schema, JsonNode value) throws Exception {
        org.apache.avro.Schema avro = new org.apache.avro.Schema.Parser().parse(schema.get("definition").asText());
        GenericDatumReader<Object> reader = new GenericDatumReader<>(avro);
        Object record = reader.read(null, DecoderFactory.get().jsonDecoder(avro, JSON.writeValueAsString(value)));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        new GenericDatumWriter<Object>(avro).write(record, enc);
        enc.flush();
        return out.toByteArray();
    }

    static Message protoValue(JsonNode value) throws Exception {
        SchemaRegistryFormat.SchemaInfo.Builder b = SchemaRegistryFormat.SchemaInfo.newBuilder();
        JsonFormat.parser().merge(JSON.writeValueAsString(value), b);
        return b.build();
    }

    interface Command {
        ObjectNode run(PulsarClient client, JsonNode spec) throws Exception;
    }

    static ObjectNode each(PulsarClient client, JsonNode spec, Command command) throws Exception {
        if (!spec.has("all")) {
            return command.run(client, spec);
        }
        ObjectNode out = JSON.createObjectNode();
        ArrayNode all = out.putArray("all");
        for (JsonNode one : spec.get("all")) {
            all.add(command.run(client, one));
        }
        return out;
    }

    static ObjectNode produce(PulsarClient client, JsonNode spec) throws Exception {
        return each(client, spec, SchemaClient::produceOne);
    }

    static ObjectNode consume(PulsarClient client, JsonNode spec) throws Exception {
        return each(client, spec, SchemaClient::consumeOne);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    static ObjectNode produceOne(PulsarClient client, JsonNode spec) throws Exception {
        JsonNode schema = spec.get("schema");
        String type = schema.get("type").asText();
        Schema s;
        switch (type) {
            case "AVRO", "JSON" -> s = Schema.AUTO_PRODUCE_BYTES(Schema.generic(structInfo(schema)));
            case "PROTOBUF" -> s = ProtobufSchema.of(SchemaRegistryFormat.SchemaInfo.class);
            case "PROTOBUF_NATIVE" -> s = ProtobufNativeSchema.of(SchemaRegistryFormat.SchemaInfo.class);
            case "KEY_VALUE" -> s = Schema.KeyValue(
                    primitive(schema.get("key").get("type").asText()),
                    primitive(schema.get("value").get("type").asText()),
                    KeyValueEncodingType.valueOf(schema.get("encoding").asText()));
            default -> s = primitive(type);
        }
        ObjectNode out = JSON.createObjectNode();
        ArrayNode ids = out.putArray("message_ids");
        List<CompletableFuture<MessageId>> sent = new ArrayList<>();
        try (Producer producer = client.newProducer(s)
                .topic(spec.get("topic").asText())
                .enableBatching(spec.path("batching").asBoolean(false))
                .create()) {
            for (JsonNode m : spec.get("messages")) {
                TypedMessageBuilder b = producer.newMessage();
                if (m.hasNonNull("key")) {
                    b.key(m.get("key").asText());
                }
                JsonNode v = m.get("value");
                switch (type) {
                    case "AVRO" -> b.value(avroBytes(schema, v));
                    case "JSON" -> b.value(JSON.writeValueAsBytes(v));
                    case "PROTOBUF", "PROTOBUF_NATIVE" -> b.value(protoValue(v));
                    case "KEY_VALUE" -> b.value(new KeyValue(
                            primitiveValue(schema.get("key").get("type").asText(), v.get("key")),
                            primitiveValue(schema.get("value").get("type").asText(), v.get("value"))));
                    default -> b.value(primitiveValue(type, v));
                }
                sent.add(b.sendAsync());
            }
            producer.flush();
            for (CompletableFuture<MessageId> f : sent) {
                ids.add(SandboxClient.id(f.get(60, TimeUnit.SECONDS)));
            }
        }
        return out;
    }

    static JsonNode toJson(Object v) throws Exception {
        if (v == null) {
            return JSON.nullNode();
        }
        if (v instanceof GenericJsonRecord j) {
            return j.getJsonNode();
        }
        if (v instanceof GenericRecord r) {
            SchemaType t = r.getSchemaType();
            if (t != SchemaType.AVRO && t != SchemaType.JSON && t != SchemaType.PROTOBUF_NATIVE) {
                // AUTO_CONSUME wraps primitives and KeyValues as generic records too
                return toJson(r.getNativeObject());
            }
            if (t == SchemaType.PROTOBUF_NATIVE) {
                return JSON.readTree(JsonFormat.printer().preservingProtoFieldNames()
                        .print((Message) r.getNativeObject()));
            }
            ObjectNode o = JSON.createObjectNode();
            for (Field f : r.getFields()) {
                o.set(f.getName(), toJson(r.getField(f)));
            }
            return o;
        }
        if (v instanceof Message m) {
            return JSON.readTree(JsonFormat.printer().preservingProtoFieldNames().print(m));
        }
        if (v instanceof KeyValue<?, ?> kv) {
            ObjectNode o = JSON.createObjectNode();
            o.set("key", toJson(kv.getKey()));
            o.set("value", toJson(kv.getValue()));
            return o;
        }
        if (v instanceof java.util.Date d) {
            return JSON.getNodeFactory().numberNode(d.getTime());
        }
        if (v instanceof Instant || v instanceof LocalDate || v instanceof LocalTime
                || v instanceof LocalDateTime || v instanceof CharSequence) {
            return JSON.getNodeFactory().textNode(v.toString());
        }
        if (v instanceof byte[] b) {
            return JSON.getNodeFactory().textNode(Base64.getEncoder().encodeToString(b));
        }
        if (v instanceof ByteBuffer bb) {
            byte[] b = new byte[bb.remaining()];
            bb.duplicate().get(b);
            return JSON.getNodeFactory().textNode(Base64.getEncoder().encodeToString(b));
        }
        if (v instanceof List<?> list) {
            ArrayNode a = JSON.createArrayNode();
            for (Object item : list) {
                a.add(toJson(item));
            }
            return a;
        }
        if (v instanceof Map<?, ?> map) {
            ObjectNode o = JSON.createObjectNode();
            for (Map.Entry<?, ?> e : map.entrySet()) {
                o.set(String.valueOf(e.getKey()), toJson(e.getValue()));
            }
            return o;
        }
        return JSON.valueToTree(v);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    static ObjectNode consumeOne(PulsarClient client, JsonNode spec) throws Exception {
        JsonNode schema = spec.path("schema");
        Schema s = "PROTOBUF".equals(schema.path("type").asText())
                ? ProtobufSchema.of(SchemaRegistryFormat.SchemaInfo.class)
                : Schema.AUTO_CONSUME();
        ObjectNode out = JSON.createObjectNode();
        ArrayNode messages = out.putArray("messages");
        int count = spec.get("count").asInt();
        try (Consumer consumer = client.newConsumer(s)
                .topic(spec.get("topic").asText())
                .subscriptionName("ledgerctl-schema-consume")
                .subscriptionMode(SubscriptionMode.NonDurable)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (int i = 0; i < count; i++) {
                org.apache.pulsar.client.api.Message m = consumer.receive(60, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("only " + i + " of " + count + " messages received");
                }
                ObjectNode item = messages.addObject();
                item.put("message_id", SandboxClient.id(m.getMessageId()));
                byte[] version = m.getSchemaVersion();
                if (version == null) {
                    item.putNull("schema_version");
                } else {
                    item.put("schema_version", ByteBuffer.wrap(version).getLong());
                }
                item.set("value", toJson(m.getValue()));
            }
        }
        return out;
    }

    /** The texts `pulsar-admin schemas get TOPIC [--version V]` prints (its println of
     *  the admin client's answers). */
    static ObjectNode adminGet(JsonNode spec) throws Exception {
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(spec.get("web_url").asText()).build()) {
            if (!spec.has("topics")) {
                return adminGetOne(admin, spec.get("topic").asText());
            }
            ObjectNode out = JSON.createObjectNode();
            ArrayNode all = out.putArray("all");
            for (JsonNode topic : spec.get("topics")) {
                all.add(adminGetOne(admin, topic.asText()));
            }
            return out;
        }
    }

    static ObjectNode adminGetOne(PulsarAdmin admin, String topic) throws Exception {
        ObjectNode out = JSON.createObjectNode();
        SchemaInfoWithVersion latest = admin.schemas().getSchemaInfoWithVersion(topic);
        out.put("latest", latest.toString());
        ObjectNode versions = out.putObject("versions");
        for (long v = 0; v <= latest.getVersion(); v++) {
            versions.put(Long.toString(v), admin.schemas().getSchemaInfo(topic, v).toString());
        }
        return out;
    }
}
