package io.floodgate.spark.read;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.ConfluentDecoder;
import io.floodgate.spark.serde.KeySchema;
import io.floodgate.spark.serde.SchemaRegistryClient;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import java.util.List;
import org.apache.avro.Schema;

/**
 * The decoder of a source's {@code encoding} ({@code single-object} or {@code confluent}), as
 * {@code pipeline.serde.confluent.stream_codec} picks Floodgate's Python codec of a stream.
 */
final class Decoders {
  private Decoders() {}

  /**
   * A decoder for one task.
   *
   * @param options the source's options ({@code encoding}, {@code schemaRegistry.*})
   * @param topic the topic of the tuples decoded (Confluent's subject is {@code <topic>-value})
   * @param schema the stream's schema
   * @param repository the schemas of option {@code schemas} (single-object writer schemas)
   * @param fields the stream's fields to decode
   * @param ordinals the row ordinal of each field
   * @return {@code single-object}: a {@link TupleDecoder}; {@code confluent}: a {@link
   *     ConfluentDecoder} asking the JVM's shared {@link SchemaRegistryClient} of {@code
   *     schemaRegistry.*}
   * @throws IllegalArgumentException {@code confluent} without {@code schemaRegistry.url}, or a
   *     {@code schemaRegistry.*} option refused (named)
   */
  static TupleDecoder forOptions(
      SourceOptions options,
      String topic,
      Schema schema,
      SchemaRepository repository,
      List<String> fields,
      int[] ordinals) {
    if (options.encoding.equals("confluent")) {
      return new ConfluentDecoder(
          options.stream,
          topic,
          schema,
          SchemaRegistryClient.shared(options.schemaRegistry),
          fields,
          ordinals);
    }
    return new TupleDecoder(options.stream, schema, repository, fields, ordinals);
  }

  /**
   * The key decoder of {@code keyEncoding = confluent}, for one task.
   *
   * @param options the source's options ({@code keyFields}, {@code schemaRegistry.*})
   * @param topic the topic of the keys decoded
   * @param schema the stream's schema (the key fields' declarations)
   * @return a {@link ConfluentDecoder} of the key record ({@link KeySchema}), subject {@code
   *     <topic>-key}
   * @throws IllegalArgumentException a key field that is no field of the schema, or a {@code
   *     schemaRegistry.*} option refused (named)
   */
  static ConfluentDecoder forKey(SourceOptions options, String topic, Schema schema) {
    return ConfluentDecoder.forKey(
        options.stream,
        topic,
        KeySchema.of(options.stream, schema, options.keyFields),
        SchemaRegistryClient.shared(options.schemaRegistry));
  }
}
