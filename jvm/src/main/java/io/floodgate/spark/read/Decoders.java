package io.floodgate.spark.read;

import io.floodgate.spark.SourceOptions;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import java.util.List;
import org.apache.avro.Schema;

/** The decoder of a source's {@code encoding}. */
final class Decoders {
  private Decoders() {}

  static TupleDecoder forOptions(
      SourceOptions options,
      Schema schema,
      SchemaRepository repository,
      List<String> fields,
      int[] ordinals) {
    if (options.encoding.equals("confluent")) {
      throw new IllegalArgumentException(
          "floodgate_kafka: encoding = 'confluent' is not read by the JVM source yet; set the"
              + " query group's source = \"python\" for this stream");
    }
    return new TupleDecoder(options.stream, schema, repository, fields, ordinals);
  }
}
