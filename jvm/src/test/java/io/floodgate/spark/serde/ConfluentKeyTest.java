package io.floodgate.spark.serde;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.options.SourceOptions;
import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Keys in the Confluent wire format ({@code keyEncoding = confluent}): the key record's schema, the
 * decoder of subject {@code <topic>-key}, and the options (the {@code key} column's struct is
 * checked end to end against a real Schema Registry in
 * tests/integration/registry/test_confluent_key.py, where Spark's types load).
 */
class ConfluentKeyTest {
  private FakeSchemaRegistry registry;
  private SchemaRegistryClient client;

  @BeforeEach
  void start() throws IOException {
    registry = new FakeSchemaRegistry();
    client = new SchemaRegistryClient(Map.of("url", registry.url(), "max.retries", "0"));
  }

  @AfterEach
  void stop() {
    registry.close();
  }

  @Test
  void theKeySchemaIsARecordOfTheKeyFieldsInTheirOrderAsTheStreamDeclaresThem() {
    Schema key =
        KeySchema.of("flights", ConfluentDecoderTest.READER, List.of("time_hour", "carrier"));
    assertEquals("floodgate.flights.FlightKey", key.getFullName());
    assertEquals(
        List.of("time_hour", "carrier"), key.getFields().stream().map(Schema.Field::name).toList());
    assertEquals(
        ConfluentDecoderTest.READER.getField("time_hour").schema(),
        key.getField("time_hour").schema());
    // The same schema as pipeline.serde.confluent.key_schema writes (field doc and default kept).
    assertEquals(
        new Schema.Parser()
            .parse(
                "{\"type\":\"record\",\"name\":\"FlightKey\",\"namespace\":\"floodgate.flights\","
                    + "\"fields\":[{\"name\":\"time_hour\",\"type\":"
                    + "{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
                    + "{\"name\":\"carrier\",\"type\":\"string\"}]}"),
        key);
  }

  @Test
  void aKeyFieldThatIsNoFieldOfTheSchemaOrNoKeyFieldIsRefused() {
    IllegalArgumentException refused =
        assertThrows(
            IllegalArgumentException.class,
            () -> KeySchema.of("flights", ConfluentDecoderTest.READER, List.of("carrier", "gate")));
    assertTrue(refused.getMessage().contains("not fields: [gate]"), refused.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () -> KeySchema.of("flights", ConfluentDecoderTest.READER, List.of()));
  }

  @Test
  void aKeyDecodesIntoItsStructAskingForSubjectTopicKey() throws IOException, TupleRejected {
    Schema key =
        KeySchema.of("flights", ConfluentDecoderTest.READER, List.of("carrier", "time_hour"));
    registry.register(12, key.toString());
    ConfluentDecoder decoder = ConfluentDecoder.forKey("flights", "flights-topic", key, client);
    byte[] data =
        ConfluentDecoderTest.framed(
            12,
            ConfluentDecoderTest.body(
                key, Map.of("carrier", "UA", "time_hour", ConfluentDecoderTest.TIME_HOUR_MS)));
    GenericInternalRow row = new GenericInternalRow(2);
    decoder.decode(data, row);
    assertEquals("UA", row.getUTF8String(0).toString());
    assertEquals(ConfluentDecoderTest.TIME_HOUR_MS * 1000, row.getLong(1));
    assertEquals(List.of("/schemas/ids/12?subject=flights-topic-key"), registry.requests);
    TupleRejected refused =
        assertThrows(
            TupleRejected.class,
            () -> decoder.decode("UA|1545".getBytes(), new GenericInternalRow(2)));
    assertEquals("bad-magic-byte", refused.reason());
  }

  @Test
  void keyEncodingConfluentNeedsTheSchemaTheKeyFieldsAndTheRegistry() {
    Map<String, String> options = new HashMap<>();
    options.put("kafka.bootstrap.servers", "localhost:9092");
    options.put("subscribe", "flights");
    options.put("keyEncoding", "confluent");
    IllegalArgumentException refused =
        assertThrows(IllegalArgumentException.class, () -> SourceOptions.parse(options));
    assertEquals(
        "floodgate_kafka: keyEncoding = 'confluent' needs options ['schema', 'keyFields',"
            + " 'schemaRegistry.url'] (the key is an Avro record of keyFields of the stream's"
            + " schema, its ids from the Schema Registry); allowed: keyEncoding 'raw', or give"
            + " them",
        refused.getMessage());
    options.put("keyEncoding", "avro");
    refused = assertThrows(IllegalArgumentException.class, () -> SourceOptions.parse(options));
    assertTrue(refused.getMessage().contains("allowed: raw, confluent"), refused.getMessage());
    options.put("keyEncoding", "confluent");
    options.put("schema", "flight");
    options.put("schemas", "{}");
    options.put("keyFields", "carrier, flight");
    options.put("schemaRegistry.url", "http://registry:8081");
    SourceOptions parsed = SourceOptions.parse(options);
    assertEquals("confluent", parsed.keyEncoding);
    assertEquals(List.of("carrier", "flight"), parsed.keyFields);
  }
}
