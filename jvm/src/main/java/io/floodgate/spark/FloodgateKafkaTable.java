package io.floodgate.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The topics read as a table Spark reads in micro-batches, or in one batch ({@code spark.read}).
 */
final class FloodgateKafkaTable implements SupportsRead {
  private final StructType schema;
  private final Map<String, String> properties;

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
    return EnumSet.of(TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> given = new HashMap<>(options.asCaseSensitiveMap());
    BatchBounds bounds = BatchBounds.take(given);
    return new KafkaScanBuilder(schema, SourceOptions.parse(given), bounds);
  }
}
