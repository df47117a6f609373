package io.floodgate.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/**
 * Builds the source's scan. It takes the columns a query reads when Spark pushes them down ({@link
 * SupportsPushDownRequiredColumns}); Spark 4 plans a streaming scan without that push down, so the
 * query group also names them in option {@code fields}.
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
