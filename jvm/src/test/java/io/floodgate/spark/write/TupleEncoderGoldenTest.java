package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.Golden;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * {@link TupleEncoder} against {@code tests/golden/sink/encoded.json}: the keys and values the
 * Python sink writes for the same rows (made by {@code tests/golden/sink/make_encoded.py} with the
 * Python codec), byte for byte, and the rows it refuses.
 */
class TupleEncoderGoldenTest {
  static final HexFormat HEX = HexFormat.of();

  /** The Spark types of the golden cases, by {@code DataType.simpleString}. */
  static final Map<String, DataType> TYPES =
      Map.ofEntries(
          Map.entry("tinyint", DataTypes.ByteType),
          Map.entry("smallint", DataTypes.ShortType),
          Map.entry("int", DataTypes.IntegerType),
          Map.entry("bigint", DataTypes.LongType),
          Map.entry("float", DataTypes.FloatType),
          Map.entry("double", DataTypes.DoubleType),
          Map.entry("boolean", DataTypes.BooleanType),
          Map.entry("string", DataTypes.StringType),
          Map.entry("binary", DataTypes.BinaryType),
          Map.entry("date", DataTypes.DateType),
          Map.entry("timestamp", DataTypes.TimestampType),
          Map.entry("timestamp_ntz", DataTypes.TimestampNTZType));

  @TestFactory
  Stream<DynamicTest> everyCaseIsWrittenAsPythonWritesIt() {
    JsonNode cases = Golden.read("sink/encoded.json").get("cases");
    assertTrue(cases.size() > 50, "the golden file has its cases");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : cases) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> check(c)));
    }
    return tests.stream();
  }

  private static void check(JsonNode c) {
    StructType rowType = rowType(c.get("columns"));
    TupleEncoder encoder = encoder(c, rowType);
    int n = 0;
    for (JsonNode expected : c.get("rows")) {
      String where = c.get("name").asText() + ", row " + n++ + " " + expected.get("values");
      InternalRow row = row(rowType, expected.get("values"));
      if (expected.has("error")) {
        TupleRefusedException refused =
            assertThrows(
                TupleRefusedException.class,
                () -> {
                  encoder.value(row);
                  encoder.key(row);
                },
                where);
        for (JsonNode part : expected.get("error_parts")) {
          assertTrue(
              refused.getMessage().contains(part.asText()),
              where + ": '" + refused.getMessage() + "' should contain '" + part.asText() + "'");
        }
        assertEquals("golden", refused.stream());
        continue;
      }
      assertEquals(expected.get("value").asText(), HEX.formatHex(encoder.value(row)), where);
      byte[] key = encoder.key(row);
      if (expected.get("key").isNull()) {
        assertNull(key, where);
      } else {
        assertEquals(
            expected.get("key").asText(),
            HEX.formatHex(key),
            where + ": key " + new String(key, java.nio.charset.StandardCharsets.UTF_8));
      }
    }
  }

  static TupleEncoder encoder(JsonNode c, StructType rowType) {
    Schema schema = new Schema.Parser().parse(c.get("schema").toString());
    List<String> key = new ArrayList<>();
    c.get("key").forEach(k -> key.add(k.asText()));
    return c.get("encoding").asText().equals("confluent")
        ? TupleEncoder.confluent("golden", rowType, schema, key, c.get("schema_id").asInt())
        : TupleEncoder.singleObject("golden", rowType, schema, key);
  }

  static StructType rowType(JsonNode columns) {
    List<StructField> fields = new ArrayList<>();
    for (JsonNode column : columns) {
      DataType type = TYPES.get(column.get(1).asText());
      fields.add(new StructField(column.get(0).asText(), type, true, Metadata.empty()));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  /** A row of Spark's internal values from the golden file's JSON form of them. */
  static InternalRow row(StructType rowType, JsonNode values) {
    Object[] out = new Object[rowType.size()];
    for (int i = 0; i < out.length; i++) {
      JsonNode v = values.get(i);
      if (v.isNull()) {
        continue;
      }
      DataType t = rowType.fields()[i].dataType();
      if (t == DataTypes.ByteType) {
        out[i] = (byte) v.asInt();
      } else if (t == DataTypes.ShortType) {
        out[i] = (short) v.asInt();
      } else if (t == DataTypes.IntegerType || t == DataTypes.DateType) {
        out[i] = v.asInt();
      } else if (t == DataTypes.LongType
          || t == DataTypes.TimestampType
          || t == DataTypes.TimestampNTZType) {
        out[i] = v.asLong();
      } else if (t == DataTypes.FloatType) {
        out[i] = (float) real(v);
      } else if (t == DataTypes.DoubleType) {
        out[i] = real(v);
      } else if (t == DataTypes.BooleanType) {
        out[i] = v.asBoolean();
      } else if (t == DataTypes.BinaryType) {
        out[i] = HEX.parseHex(v.asText());
      } else {
        out[i] = UTF8String.fromString(v.asText());
      }
    }
    return new GenericInternalRow(out);
  }

  private static double real(JsonNode v) {
    if (v.isTextual()) {
      switch (v.asText()) {
        case "NaN":
          return Double.NaN;
        case "Infinity":
          return Double.POSITIVE_INFINITY;
        case "-Infinity":
          return Double.NEGATIVE_INFINITY;
        default:
          throw new IllegalArgumentException(v.asText());
      }
    }
    return v.asDouble();
  }

  @Test
  void theGoldenFileCoversEveryEncodingAndRefusals() {
    JsonNode cases = Golden.read("sink/encoded.json").get("cases");
    boolean confluent = false;
    boolean refused = false;
    for (JsonNode c : cases) {
      confluent |= c.get("encoding").asText().equals("confluent");
      for (JsonNode r : c.get("rows")) {
        refused |= r.has("error");
      }
    }
    assertTrue(confluent);
    assertTrue(refused);
    assertFalse(cases.isEmpty());
  }
}
