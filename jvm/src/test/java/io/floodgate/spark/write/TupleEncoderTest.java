package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * {@link TupleEncoder}'s refusals (their text, and where the JVM refuses what Python writes), what
 * it does not build, and its buffer and serialization; the bytes themselves are {@link
 * TupleEncoderGoldenTest}'s.
 */
class TupleEncoderTest {
  static Schema record(String fieldsJson) {
    return new Schema.Parser()
        .parse(
            "{\"type\":\"record\",\"name\":\"T\",\"namespace\":\"t\",\"fields\":["
                + fieldsJson
                + "]}");
  }

  static StructType columns(String name, DataType type) {
    return new StructType(new StructField[] {new StructField(name, type, true, Metadata.empty())});
  }

  static TupleEncoder encoder(String fieldType, DataType column, List<String> key) {
    return TupleEncoder.singleObject(
        "s", columns("x", column), record("{\"name\":\"x\",\"type\":" + fieldType + "}"), key);
  }

  static InternalRow row(Object... values) {
    return new GenericInternalRow(values);
  }

  static TupleRefusedException refusal(TupleEncoder encoder, InternalRow row) {
    return assertThrows(TupleRefusedException.class, () -> encoder.value(row));
  }

  @Test
  void aRefusalIsPythonsText() {
    TupleRefusedException e =
        refusal(encoder("\"int\"", DataTypes.LongType, List.of()), row(2147483648L));
    assertEquals(
        "stream 's': field 'x' = 2147483648 (int) is refused: 2147483648 is outside Avro int's"
            + " 32 bits (-2147483648..2147483647)",
        e.getMessage());
    assertEquals("s", e.stream());
    assertEquals("x", e.field());
    e = refusal(encoder("\"long\"", DataTypes.DoubleType, List.of()), row(1400.7));
    assertEquals(
        "stream 's': field 'x' = 1400.7 (float) is refused: an integer field takes an int, or a"
            + " float with no fraction (1545.0); it is never truncated",
        e.getMessage());
  }

  @Test
  void aKeyOfARefusedValueIsRefusedToo() {
    TupleEncoder encoder = encoder("\"int\"", DataTypes.DoubleType, List.of("x"));
    assertThrows(TupleRefusedException.class, () -> encoder.key(row(0.5)));
    assertEquals("3", new String(encoder.key(row(3.0)), StandardCharsets.UTF_8));
  }

  @Test
  void aLongValueIsCutInTheMessageAsPythonCutsIt() {
    String text = "a".repeat(100);
    TupleRefusedException e =
        refusal(
            encoder("\"int\"", DataTypes.StringType, List.of()), row(UTF8String.fromString(text)));
    assertTrue(
        e.getMessage().contains("= '" + "a".repeat(76) + "... (str) is refused"), e.getMessage());
  }

  /** fastavro writes a null into a "boolean" field as false; the JVM refuses it, as any null. */
  @Test
  void aNullForAFieldThatIsNoUnionWithNullIsRefused() {
    for (String type : List.of("\"boolean\"", "\"int\"", "\"string\"")) {
      TupleRefusedException e =
          refusal(encoder(type, DataTypes.BooleanType, List.of()), row((Object) null));
      assertTrue(
          e.getMessage().startsWith("stream 's': field 'x' = None does not match schema 't.T'"));
      assertTrue(e.getMessage().contains("takes no null"), e.getMessage());
    }
  }

  /** fastavro truncates these into a timestamp-micros field; the JVM never truncates. */
  @Test
  void aFloatOrABooleanForTimestampMicrosIsRefused() {
    String micros = "{\"type\":\"long\",\"logicalType\":\"timestamp-micros\"}";
    TupleRefusedException e = refusal(encoder(micros, DataTypes.DoubleType, List.of()), row(1.5));
    assertTrue(e.getMessage().contains("= 1.5 (float) is refused"), e.getMessage());
    e = refusal(encoder(micros, DataTypes.BooleanType, List.of()), row(true));
    assertTrue(e.getMessage().contains("= True (bool) is refused"), e.getMessage());
  }

  /** Python's int of the float goes to fastavro, which fails with an OverflowError. */
  @Test
  void aWholeFloatBeyond64BitsIsRefused() {
    TupleRefusedException e =
        refusal(encoder("\"long\"", DataTypes.DoubleType, List.of()), row(1e20));
    assertTrue(
        e.getMessage().endsWith("is refused: 100000000000000000000 is outside Avro long's 64 bits"),
        e.getMessage());
    e = refusal(encoder("\"long\"", DataTypes.DoubleType, List.of()), row(0x1p63));
    assertTrue(e.getMessage().contains("9223372036854775808 is outside"), e.getMessage());
    String millis = "{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}";
    byte[] least = encoder(millis, DataTypes.DoubleType, List.of()).value(row(-0x1p63));
    assertEquals("ffffffffffffffffff01", HexFormat.of().formatHex(least, 10, least.length));
  }

  @Test
  void whatNoRowCouldBeWrittenWithIsRefusedAtOnce() {
    assertThrows(
        IllegalArgumentException.class,
        () -> encoder("{\"type\":\"array\",\"items\":\"int\"}", DataTypes.IntegerType, List.of()));
    assertThrows(
        IllegalArgumentException.class,
        () -> encoder("[\"int\",\"string\"]", DataTypes.IntegerType, List.of()));
    assertThrows(
        IllegalArgumentException.class,
        () -> encoder("[\"null\",\"int\",\"string\"]", DataTypes.IntegerType, List.of()));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                encoder(
                    "{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":4,\"scale\":2}",
                    DataTypes.BinaryType,
                    List.of()));
    assertTrue(e.getMessage().contains("field 'x'"), e.getMessage());
    e =
        assertThrows(
            IllegalArgumentException.class,
            () -> encoder("\"double\"", DataTypes.createDecimalType(10, 2), List.of()));
    assertTrue(e.getMessage().contains("column 'x' has Spark type decimal(10,2)"), e.getMessage());
    // A key column that is no field, of a type with no key text here.
    StructType two =
        new StructType(
            new StructField[] {
              new StructField("x", DataTypes.IntegerType, true, Metadata.empty()),
              new StructField(
                  "k", DataTypes.createArrayType(DataTypes.IntegerType), true, Metadata.empty())
            });
    assertThrows(
        IllegalArgumentException.class,
        () ->
            TupleEncoder.singleObject(
                "s", two, record("{\"name\":\"x\",\"type\":\"int\"}"), List.of("k")));
  }

  @Test
  void noKeyColumnsIsNoKey() {
    assertNull(encoder("\"int\"", DataTypes.IntegerType, List.of()).key(row(1)));
  }

  @Test
  void theBufferGrowsAndTheArraysReturnedAreTheCallers() {
    TupleEncoder encoder = encoder("\"string\"", DataTypes.StringType, List.of("x"));
    String big = "é".repeat(1000);
    byte[] small = encoder.value(row(UTF8String.fromString("a")));
    byte[] large = encoder.value(row(UTF8String.fromString(big)));
    byte[] key = encoder.key(row(UTF8String.fromString(big)));
    assertEquals(10 + 1 + 1, small.length);
    assertEquals("61", HexFormat.of().formatHex(small, 11, 12));
    assertEquals(10 + 2 + 2000, large.length);
    assertEquals(big, new String(key, StandardCharsets.UTF_8));
    assertArrayEquals(small, encoder.value(row(UTF8String.fromString("a"))));
  }

  @Test
  void aDeserializedEncoderWritesTheSameBytes() throws IOException, ClassNotFoundException {
    Schema schema =
        record(
            "{\"name\":\"x\",\"type\":\"int\"},"
                + "{\"name\":\"t\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}");
    StructType rowType =
        new StructType(
            new StructField[] {
              new StructField("x", DataTypes.IntegerType, true, Metadata.empty()),
              new StructField("t", DataTypes.TimestampType, true, Metadata.empty())
            });
    TupleEncoder encoder = TupleEncoder.confluent("s", rowType, schema, List.of("t", "x"), 7);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(encoder);
    }
    TupleEncoder copy;
    try (ObjectInputStream in =
        new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      copy = (TupleEncoder) in.readObject();
    }
    InternalRow row = row(5, -1L);
    assertArrayEquals(encoder.value(row), copy.value(row));
    assertArrayEquals(encoder.key(row), copy.key(row));
    assertEquals("-1|5", new String(copy.key(row), StandardCharsets.UTF_8));
    assertEquals("00000000070a01", HexFormat.of().formatHex(copy.value(row)));
  }
}
