package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.StreamSchema;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * The scan's task metrics as Spark uses them: a task's value Spark keeps only under a name the scan
 * declares, and the driver makes each declared metric anew from its class name.
 */
class TaskMetricsTest {
  @Test
  void everyMetricAReaderReportsIsDeclaredByTheScan() {
    SourceOptions options =
        SourceOptions.parse(Map.of("kafka.bootstrap.servers", "127.0.0.1:9", "subscribe", "t"));
    StructType schema = StreamSchema.of(options.stream, null, false, null);
    Set<String> reported = new TreeSet<>();
    try (RangeReader reader =
        new RangeReader(
            options, schema, new RowLayout(schema, null, options), new KafkaRange[0], null)) {
      for (CustomTaskMetric m : reader.currentMetricsValues()) {
        reported.add(m.name());
      }
    }
    Set<String> declared = new TreeSet<>();
    for (CustomMetric m : TaskMetrics.supported()) {
      declared.add(m.name());
    }
    assertEquals(declared, reported);
    assertEquals(
        Set.of("rowsRead", "deadLettered", "sweptRead", "offsetOutOfRange", "dataLoss"), declared);
  }

  @Test
  void eachMetricIsMadeAgainFromItsClassNameAsSparksDriverMakesIt() throws Exception {
    for (CustomMetric m : TaskMetrics.supported()) {
      CustomMetric again =
          (CustomMetric)
              Class.forName(m.getClass().getName()).getDeclaredConstructor().newInstance();
      assertEquals(m.name(), again.name());
      assertEquals("5", again.aggregateTaskMetrics(new long[] {2, 3}));
    }
  }
}
