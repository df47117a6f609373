package io.floodgate.spark;

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

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.required = requiredSchema;
  }

  @Override
  public Scan build() {
    return new KafkaScan(schema, required, options, bounds);
  }
}
