package io.floodgate.spark.serde;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.junit.jupiter.api.Test;

/** Single-object encoding through the framing {@link ConfluentDecoder} shares with it. */
class SingleObjectDecoderTest {
  private static final String SCHEMAS =
      "{\"flight\":{\"type\":\"record\",\"name\":\"Flight\",\"fields\":["
          + "{\"name\":\"carrier\",\"type\":\"string\"},{\"name\":\"flight\",\"type\":\"int\"}]}}";

  private final SchemaRepository repository = new SchemaRepository(SCHEMAS);
  private final Schema schema = repository.get("flight");
  private final TupleDecoder decoder =
      new TupleDecoder(
          "flights", schema, repository, List.of("carrier", "flight"), new int[] {0, 1});

  private byte[] encoded(String carrier, int flight) throws Exception {
    GenericRecord record = new GenericData.Record(schema);
    record.put("carrier", carrier);
    record.put("flight", flight);
    ByteBuffer buffer =
        new BinaryMessageEncoder<GenericRecord>(GenericData.get(), schema).encode(record);
    byte[] bytes = new byte[buffer.remaining()];
    buffer.get(bytes);
    return bytes;
  }

  @Test
  void aTupleDecodesIntoItsColumns() throws Exception {
    GenericInternalRow row = new GenericInternalRow(2);
    decoder.decode(encoded("UA", 1545), row);
    assertEquals("UA", row.getUTF8String(0).toString());
    assertEquals(1545, row.getInt(1));
  }

  @Test
  void aStringKeepsItsTextWhenTheNextStringIsReadIntoTheSameBuffer() throws Exception {
    Schema twoStrings =
        new SchemaRepository(
                "{\"leg\":{\"type\":\"record\",\"name\":\"Leg\",\"fields\":["
                    + "{\"name\":\"tailnum\",\"type\":\"string\"},"
                    + "{\"name\":\"origin\",\"type\":\"string\"}]}}")
            .get("leg");
    TupleDecoder legs =
        new TupleDecoder(
            "legs",
            twoStrings,
            new SchemaRepository("{\"leg\":" + twoStrings + "}"),
            List.of("tailnum", "origin"),
            new int[] {0, 1});
    GenericRecord record = new GenericData.Record(twoStrings);
    record.put("tailnum", "N14228"); // fills the decoder's buffer exactly
    record.put("origin", "JFK"); // read into the same buffer
    ByteBuffer buffer =
        new BinaryMessageEncoder<GenericRecord>(GenericData.get(), twoStrings).encode(record);
    byte[] bytes = new byte[buffer.remaining()];
    buffer.get(bytes);
    GenericInternalRow row = new GenericInternalRow(2);
    legs.decode(bytes, row);
    assertEquals("N14228", row.getUTF8String(0).toString());
    assertEquals("JFK", row.getUTF8String(1).toString());
  }

  @Test
  void refusalsKeepTheirReasonsAndNameTheSchema() throws Exception {
    byte[] good = encoded("UA", 1545);
    TupleRejected marker =
        assertThrows(
            TupleRejected.class,
            () -> decoder.decode(ConfluentDecoderTest.framed(7, good), new GenericInternalRow(2)));
    assertEquals("bad-marker", marker.reason());
    byte[] truncated = Arrays.copyOf(good, TupleDecoder.HEADER_SIZE + 1);
    TupleRejected body =
        assertThrows(
            TupleRejected.class, () -> decoder.decode(truncated, new GenericInternalRow(2)));
    assertEquals("bad-body", body.reason());
    assertTrue(body.detail().contains("with schema 'flight'"), body.detail());
    byte[] unknown = good.clone();
    unknown[2] ^= 1;
    TupleRejected fingerprint =
        assertThrows(TupleRejected.class, () -> decoder.decode(unknown, new GenericInternalRow(2)));
    assertEquals("unknown-fingerprint", fingerprint.reason());
  }
}
