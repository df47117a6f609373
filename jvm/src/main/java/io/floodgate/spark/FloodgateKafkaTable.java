package io.floodgate.spark;

import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.write.KafkaWriteBuilder;
import io.floodgate.spark.write.SinkMetrics;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.ReportsSinkMetrics;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The topics read as a table Spark reads in micro-batches, or in one batch ({@code spark.read}); or
 * an output stream a streaming query writes ({@code writeStream}, {@link KafkaWriteBuilder}).
 */
final class FloodgateKafkaTable implements SupportsRead, SupportsWrite, ReportsSinkMetrics {
  private final StructType schema;
  private final Map<String, String> properties;
  private final SinkMetrics sinkMetrics = new SinkMetrics();

  FloodgateKafkaTable(StructType schema, Map<String, String> properties) {
    this.schema = schema;
    this.properties = properties;
  }

  @Override
  public String name() {
    return SourceOptions.SOURCE_NAME
        + "("
        + properties.getOrDefault("subscribe", properties.getOrDefault("topic", ""))
        + ")";
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(
        TableCapability.MICRO_BATCH_READ,
        TableCapability.BATCH_READ,
        TableCapability.STREAMING_WRITE,
        TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new KafkaWriteBuilder(info, sinkMetrics);
  }

  @Override
  public Map<String, String> metrics() {
    return sinkMetrics.asMap();
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> given = new HashMap<>(options.asCaseSensitiveMap());
    BatchBounds bounds = BatchBounds.take(given);
    return new KafkaScanBuilder(schema, SourceOptions.parse(given), bounds);
  }
}
