package io.floodgate.spark;

import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.KeySchema;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.StreamSchema;
import io.floodgate.spark.write.SinkOptions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("floodgate_kafka")}: Kafka topics of Avro tuples (one, several
 * named, or those a pattern matches, as Spark's Kafka source reads them), as a Spark streaming (and
 * batch) source on the JVM. Registered through {@code
 * META-INF/services/org.apache.spark.sql.sources.DataSourceRegister}, like Spark's own {@code
 * kafka} source; its options are documented in docs/reference/spark-kafka-options.md.
 */
public final class FloodgateKafkaProvider implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return SourceOptions.SOURCE_NAME;
  }

  /**
   * The stream's columns: the Avro record's fields (with option {@code fields}, those and {@code
   * timestampField} only), then the metadata columns; without option {@code schema}, Spark's Kafka
   * source columns.
   *
   * @throws IllegalArgumentException bad options, a name in {@code fields} that is no field of the
   *     stream, or a schema the source cannot map
   */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    if (SinkOptions.isWrite(options)) {
      return new StructType(); // a write's columns are its query's (LogicalWriteInfo.schema)
    }
    Map<String, String> given = new HashMap<>(options.asCaseSensitiveMap());
    BatchBounds.take(given); // a batch query's bounds: the table's scan reads them
    return schema(SourceOptions.parse(given));
  }

  /** The table's schema for {@code parsed} ({@link #inferSchema}). */
  static StructType schema(SourceOptions parsed) {
    Schema avro = avroSchema(parsed);
    List<String> decoded = null;
    if (parsed.fields != null) {
      StreamSchema.requireFields(parsed.stream, avro, parsed.fields);
      decoded = new ArrayList<>(parsed.fields);
      if (parsed.timestampField != null) {
        decoded.add(parsed.timestampField);
      }
    }
    return StreamSchema.of(
        parsed.stream, avro, parsed.includeHeaders, decoded, keySchema(parsed, avro));
  }

  /**
   * The key record's schema of {@code keyEncoding = confluent} ({@link KeySchema}), {@code null}
   * for raw keys or when nothing is decoded.
   */
  static Schema keySchema(SourceOptions options, Schema avro) {
    if (avro == null || !options.keyEncoding.equals("confluent")) {
      return null;
    }
    return KeySchema.of(options.stream, avro, options.keyFields);
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new FloodgateKafkaTable(schema, properties);
  }

  /** The stream's Avro schema, {@code null} when the source decodes nothing. */
  static Schema avroSchema(SourceOptions options) {
    if (!options.decoded()) {
      return null;
    }
    return new SchemaRepository(options.schemasJson).get(options.schemaName);
  }
}
