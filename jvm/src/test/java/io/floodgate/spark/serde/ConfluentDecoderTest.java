package io.floodgate.spark.serde;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Tuples in the Confluent wire format decoded against a registry in the test's JVM: the refusal
 * reasons (docs/reference/codes.md, "Dead letters"), and a registry that cannot be asked failing
 * the task rather than refusing a tuple.
 */
class ConfluentDecoderTest {
  /** The stream's schema: what the queries read. */
  static final Schema READER =
      new Schema.Parser()
          .parse(
              "{\"type\":\"record\",\"name\":\"Flight\",\"namespace\":\"floodgate.flights\","
                  + "\"fields\":["
                  + "{\"name\":\"carrier\",\"type\":\"string\"},"
                  + "{\"name\":\"flight\",\"type\":\"long\"},"
                  + "{\"name\":\"tailnum\",\"type\":[\"null\",\"string\"],\"default\":null},"
                  + "{\"name\":\"origin\",\"type\":\"string\",\"default\":\"EWR\"},"
                  + "{\"name\":\"time_hour\",\"type\":"
                  + "{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}]}");

  /** An older schema of the stream: no origin, flight an int. */
  static final Schema OLDER =
      new Schema.Parser()
          .parse(
              "{\"type\":\"record\",\"name\":\"Flight\",\"namespace\":\"floodgate.flights\","
                  + "\"fields\":["
                  + "{\"name\":\"carrier\",\"type\":\"string\"},"
                  + "{\"name\":\"flight\",\"type\":\"int\"},"
                  + "{\"name\":\"tailnum\",\"type\":[\"null\",\"string\"],\"default\":null},"
                  + "{\"name\":\"time_hour\",\"type\":"
                  + "{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}]}");

  static final List<String> FIELDS = List.of("carrier", "flight", "tailnum", "origin", "time_hour");
  static final int[] ORDINALS = {0, 1, 2, 3, 4};
  static final long TIME_HOUR_MS = 1_357_045_200_000L;

  private FakeSchemaRegistry registry;
  private SchemaRegistryClient client;
  private ConfluentDecoder decoder;

  @BeforeEach
  void start() throws IOException {
    registry = new FakeSchemaRegistry();
    registry.register(7, READER.toString());
    registry.register(3, OLDER.toString());
    client = new SchemaRegistryClient(Map.of("url", registry.url(), "max.retries", "0"));
    decoder = new ConfluentDecoder("flights", "flights-topic", READER, client, FIELDS, ORDINALS);
  }

  @AfterEach
  void stop() {
    registry.close();
  }

  static byte[] framed(long id, byte[] body) {
    return ByteBuffer.allocate(5 + body.length).put((byte) 0).putInt((int) id).put(body).array();
  }

  static byte[] body(Schema schema, Map<String, Object> values) throws IOException {
    GenericRecord record = new GenericData.Record(schema);
    values.forEach(record::put);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
    new GenericDatumWriter<GenericRecord>(schema).write(record, encoder);
    encoder.flush();
    return out.toByteArray();
  }

  private GenericInternalRow decode(byte[] data) throws TupleRejected {
    GenericInternalRow row = new GenericInternalRow(FIELDS.size());
    decoder.decode(data, row);
    return row;
  }

  @Test
  void aTupleDecodesIntoItsColumnsAndItsSchemaIsAskedOnce() throws Exception {
    byte[] data =
        framed(
            7,
            body(
                READER,
                Map.of(
                    "carrier", "UA",
                    "flight", 1545L,
                    "tailnum", "N14228",
                    "origin", "JFK",
                    "time_hour", TIME_HOUR_MS)));
    for (int i = 0; i < 2; i++) {
      GenericInternalRow row = decode(data);
      assertEquals("UA", row.getUTF8String(0).toString());
      assertEquals(1545L, row.getLong(1));
      assertEquals("N14228", row.getUTF8String(2).toString());
      assertEquals("JFK", row.getUTF8String(3).toString());
      assertEquals(TIME_HOUR_MS * 1000, row.getLong(4)); // Spark's microseconds
    }
    assertEquals(List.of("/schemas/ids/7?subject=flights-topic-value"), registry.requests);
  }

  @Test
  void aTupleOfAnOlderWriterSchemaIsResolvedToTheStreams() throws Exception {
    byte[] data =
        framed(3, body(OLDER, Map.of("carrier", "AA", "flight", 1141, "time_hour", TIME_HOUR_MS)));
    GenericInternalRow row = decode(data);
    assertEquals("AA", row.getUTF8String(0).toString());
    assertEquals(1141L, row.getLong(1)); // int promoted to long
    assertTrue(row.isNullAt(2));
    assertEquals("EWR", row.getUTF8String(3).toString()); // the reader's default
  }

  @Test
  void anIdTheRegistryDoesNotKnowIsRefusedNamingIt() {
    TupleRejected refused =
        assertThrows(TupleRejected.class, () -> decode(framed(10_042, new byte[] {2, 4})));
    assertEquals("unknown-schema-id", refused.reason());
    assertTrue(refused.detail().contains("10042"), refused.detail());
    assertTrue(refused.detail().contains(registry.url()), refused.detail());
  }

  @Test
  void anythingButMagicByteZeroIsRefusedAsBadMagicByte() {
    byte[] singleObject = {(byte) 0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0};
    for (byte[] data : Arrays.asList(singleObject, new byte[] {0, 0, 7}, new byte[0], null)) {
      TupleRejected refused = assertThrows(TupleRejected.class, () -> decode(data));
      assertEquals("bad-magic-byte", refused.reason());
    }
    TupleRejected refused = assertThrows(TupleRejected.class, () -> decode(singleObject));
    assertTrue(refused.detail().contains("starts c301010203"), refused.detail());
    assertEquals(List.of(), registry.requests); // no registry asked for a tuple not framed
  }

  @Test
  void aBodyThatDoesNotDecodeIsRefusedAsBadBody() throws Exception {
    byte[] whole =
        body(
            READER,
            Map.of("carrier", "UA", "flight", 1545L, "origin", "JFK", "time_hour", TIME_HOUR_MS));
    byte[] truncated = framed(7, Arrays.copyOf(whole, 4));
    TupleRejected refused = assertThrows(TupleRejected.class, () -> decode(truncated));
    assertEquals("bad-body", refused.reason());
    assertTrue(refused.detail().contains("schema id 7"), refused.detail());
  }

  @Test
  void aWriterSchemaThatDoesNotResolveToTheStreamsIsRefusedAsBadBody() throws Exception {
    registry.register(
        9,
        "{\"type\":\"record\",\"name\":\"Flight\",\"namespace\":\"floodgate.flights\","
            + "\"fields\":[{\"name\":\"carrier\",\"type\":\"int\"}]}");
    TupleRejected refused =
        assertThrows(TupleRejected.class, () -> decode(framed(9, new byte[] {2})));
    assertEquals("bad-body", refused.reason());
  }

  @Test
  void aRegistryThatAnswersWithAServerErrorFailsTheTaskInsteadOfRefusingTheTuple() {
    registry.failNext(503);
    SchemaRegistryException failed =
        assertThrows(SchemaRegistryException.class, () -> decode(framed(7, new byte[] {0})));
    assertTrue(failed.getMessage().contains(registry.url()), failed.getMessage());
    assertTrue(failed.getMessage().contains("HTTP 503"), failed.getMessage());
  }

  @Test
  void aRegistryThatDoesNotAnswerFailsTheTaskNamingItsUrl() {
    String url = registry.url();
    registry.close();
    SchemaRegistryException failed =
        assertThrows(SchemaRegistryException.class, () -> decode(framed(7, new byte[] {0})));
    assertEquals(url, failed.url());
    assertTrue(failed.getMessage().contains("could not be asked"), failed.getMessage());
  }

  @Test
  void aSchemaIdIsReadUnsignedBigEndian() throws Exception {
    byte[] data = framed(0x01020304L, new byte[0]);
    assertArrayEquals(new byte[] {0, 1, 2, 3, 4}, Arrays.copyOf(data, 5));
    assertEquals(0x01020304L, decoder.writerKey(data));
    assertEquals(0xFFFFFFFEL, decoder.writerKey(framed(0xFFFFFFFEL, new byte[0])));
  }
}
