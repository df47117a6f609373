package io.floodgate.spark.write;

import io.floodgate.spark.serde.SchemaRepository;
import org.apache.avro.Schema;
import org.apache.spark.sql.types.StructType;

/** The output stream's schema and encoder, as the sink's options name them. */
final class SinkSchemas {
  private SinkSchemas() {}

  /**
   * The output stream's Avro record schema.
   *
   * @throws IllegalArgumentException the repository has no schema of that name
   */
  static Schema avro(SinkOptions options) {
    return new SchemaRepository(options.schemasJson).get(options.schemaName);
  }

  /** An encoder of {@code rowSchema}'s rows as the output stream's tuples. */
  static TupleEncoder encoder(SinkOptions options, StructType rowSchema, Schema avro) {
    return options.encoding.equals("confluent")
        ? TupleEncoder.confluent(
            options.stream, rowSchema, avro, options.keyColumns, options.schemaId)
        : TupleEncoder.singleObject(options.stream, rowSchema, avro, options.keyColumns);
  }
}
