package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.floodgate.spark.options.SourceOptions;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * Option {@code fields} shapes the source's table schema ({@link
 * FloodgateKafkaProvider#inferSchema}, through {@code schema}): the fields it names and the
 * metadata columns, nothing else, and a name that is no field of the stream is refused.
 */
class FieldsSchemaTest {
  private static final String SCHEMAS =
      "{\"leg\":{\"type\":\"record\",\"name\":\"Leg\",\"fields\":["
          + "{\"name\":\"origin\",\"type\":\"string\"},{\"name\":\"dest\",\"type\":\"string\"},"
          + "{\"name\":\"distance\",\"type\":\"int\"},"
          + "{\"name\":\"dep_time\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}"
          + "]}}";

  private static StructType inferred(Map<String, String> extra) {
    Map<String, String> given = new HashMap<>();
    given.put("kafka.bootstrap.servers", "b:1");
    given.put("subscribe", "legs");
    given.put("schema", "leg");
    given.put("schemas", SCHEMAS);
    given.putAll(extra);
    return FloodgateKafkaProvider.schema(SourceOptions.parse(given));
  }

  @Test
  void theTableHasColumnsForTheFieldsNamedAndTheMetadataOnly() {
    StructType schema = inferred(Map.of("fields", "distance,origin"));
    assertEquals(
        List.of("origin", "distance", "event_time", "_key", "_partition", "_offset", "_timestamp"),
        List.of(schema.fieldNames()).subList(0, 7));
    assertEquals(-1, List.of(schema.fieldNames()).indexOf("dest"));
  }

  @Test
  void theTimestampFieldIsAColumnThoughFieldsDoesNotNameIt() {
    StructType schema =
        inferred(
            Map.of(
                "fields", "origin", "timestampMode", "data_source", "timestampField", "dep_time"));
    assertEquals(List.of("origin", "dep_time"), List.of(schema.fieldNames()).subList(0, 2));
  }

  @Test
  void withoutFieldsEveryFieldIsAColumn() {
    assertEquals(
        List.of("origin", "dest", "distance", "dep_time"),
        List.of(inferred(Map.of()).fieldNames()).subList(0, 4));
  }

  @Test
  void aMisspelledFieldIsRefusedNamingItAndTheStreamsFields() {
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> inferred(Map.of("fields", "origin,destt")));
    assertEquals(
        "stream 'legs': option 'fields' names [destt], which its record does not have;"
            + " its fields: origin, dest, distance, dep_time",
        e.getMessage());
  }

  @Test
  void fieldsWithoutASchemaIsRefused() {
    Map<String, String> given = new HashMap<>();
    given.put("kafka.bootstrap.servers", "b:1");
    given.put("subscribe", "legs");
    given.put("fields", "origin");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> SourceOptions.parse(given));
    assertEquals(
        "floodgate_kafka: option 'fields' needs option 'schema': it names fields of the stream's"
            + " schema, and without one the source reads raw Kafka columns",
        e.getMessage());
  }
}
