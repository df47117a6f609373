package io.floodgate.spark;

import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.SourceOptions;
import java.util.List;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/**
 * Builds the source's scan, reading the columns Spark asks for ({@link
 * SupportsPushDownRequiredColumns}). A batch query's scan gets only the columns the query reads
 * (Spark's {@code V2ScanRelationPushDown}); a streaming query's does not: Spark 4's {@code
 * MicroBatchExecution} calls {@link #pruneColumns} with the relation's whole output, before the
 * query is optimized. Option {@code fields} therefore shapes the table's schema itself ({@code
 * FloodgateKafkaProvider.inferSchema}), so a streaming query cannot read a field it does not name.
 */
final class KafkaScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
  private final StructType schema;
  private final SourceOptions options;
  private final BatchBounds bounds;
  private StructType required;

  KafkaScanBuilder(StructType schema, SourceOptions options, BatchBounds bounds) {
    this.schema = schema;
    this.options = options;
    this.bounds = bounds;
    this.required = schema;
  }

  /**
   * Reads the columns Spark asks for, and the {@code timestampField} column with {@code event_time}
   * when {@code timestampMode = data_source}: the event time is read from that field, so a batch
   * query reading {@code event_time} alone would otherwise get NULL. Spark keeps an extra column of
   * the read schema out of the query's output ({@code V2ScanRelationPushDown} projects it away).
   */
  @Override
  public void pruneColumns(StructType requiredSchema) {
    String field = options.timestampField;
    List<String> names = List.of(requiredSchema.fieldNames());
    if (options.timestampMode.equals("data_source")
        && field != null
        && names.contains("event_time")
        && !names.contains(field)
        && List.of(schema.fieldNames()).contains(field)) {
      requiredSchema = requiredSchema.add(schema.apply(field));
    }
    this.required = requiredSchema;
  }

  @Override
  public Scan build() {
    return new KafkaScan(schema, required, options, bounds);
  }
}
