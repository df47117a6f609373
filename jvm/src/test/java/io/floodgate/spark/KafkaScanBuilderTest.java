package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.SourceOptions;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** The columns a scan reads when Spark prunes them (a batch query's scan). */
class KafkaScanBuilderTest {
  private static final String SCHEMAS =
      "{\"leg\":{\"type\":\"record\",\"name\":\"Leg\",\"fields\":["
          + "{\"name\":\"origin\",\"type\":\"string\"},"
          + "{\"name\":\"dep_time\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}}"
          + "]}}";

  private static List<String> read(String timestampMode, String... required) {
    Map<String, String> given = new HashMap<>();
    given.put("kafka.bootstrap.servers", "b:1");
    given.put("subscribe", "legs");
    given.put("schema", "leg");
    given.put("schemas", SCHEMAS);
    given.put("timestampMode", timestampMode);
    given.put("timestampField", "dep_time");
    BatchBounds bounds = BatchBounds.take(given);
    SourceOptions options = SourceOptions.parse(given);
    StructType schema = FloodgateKafkaProvider.schema(options);
    StructType asked = new StructType();
    for (String name : required) {
      asked = asked.add(schema.apply(name));
    }
    KafkaScanBuilder builder = new KafkaScanBuilder(schema, options, bounds);
    builder.pruneColumns(asked);
    return List.of(builder.build().readSchema().fieldNames());
  }

  @Test
  void theScanReadsTheColumnsAsked() {
    assertEquals(List.of("origin", "_offset"), read("data_source", "origin", "_offset"));
  }

  @Test
  void eventTimeFromTheDataIsReadWithItsFieldThoughTheQueryDoesNotAskForIt() {
    assertEquals(List.of("event_time", "dep_time"), read("data_source", "event_time"));
  }

  @Test
  void eventTimeFromTheServerNeedsNoField() {
    assertEquals(List.of("event_time"), read("server", "event_time"));
  }
}
