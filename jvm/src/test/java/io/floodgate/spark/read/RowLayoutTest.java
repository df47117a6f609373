package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.StreamSchema;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** Which columns {@link RowLayout} decodes, and the column it refuses. */
class RowLayoutTest {
  private static final String SCHEMAS =
      "{\"leg\":{\"type\":\"record\",\"name\":\"Leg\",\"fields\":["
          + "{\"name\":\"origin\",\"type\":\"string\"},{\"name\":\"dest\",\"type\":\"string\"},"
          + "{\"name\":\"distance\",\"type\":\"int\"}]}}";

  private static final Schema AVRO = new SchemaRepository(SCHEMAS).get("leg");

  private static SourceOptions options(String fields) {
    Map<String, String> given = new HashMap<>();
    given.put("kafka.bootstrap.servers", "b:1");
    given.put("subscribe", "legs");
    given.put("schema", "leg");
    given.put("schemas", SCHEMAS);
    if (fields != null) {
      given.put("fields", fields);
    }
    return SourceOptions.parse(given);
  }

  @Test
  void everyFieldColumnOfTheSchemaIsDecoded() {
    StructType schema = StreamSchema.of("legs", AVRO, false, List.of("origin", "distance"));
    RowLayout layout = new RowLayout(schema, AVRO, options("origin,distance"));
    assertEquals(List.of("origin", "distance"), layout.decodedFields);
    assertArrayEquals(new int[] {0, 1}, layout.decodedOrdinals);
  }

  @Test
  void aColumnOfAFieldOutsideFieldsIsRefusedByNameNotReadAsNull() {
    StructType everyField = StreamSchema.of("legs", AVRO, false, null);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> new RowLayout(everyField, AVRO, options("origin")));
    assertTrue(e.getMessage().contains("column 'dest'"), e.getMessage());
    assertTrue(e.getMessage().contains("fields: origin"), e.getMessage());
  }
}
