package io.floodgate.spark.alignment;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.ConfluentDecoder;
import io.floodgate.spark.serde.SchemaRegistryClient;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import io.floodgate.spark.serde.TupleRejected;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;

/**
 * A record's event time (epoch ms) as the source's tasks read it ({@code RangeReader}) and the
 * planning's alignment reads it ({@link EventTimeProbe}): the Kafka timestamp ({@code timestampMode
 * = server}), or the decoded {@code timestampField} ({@code data_source}); {@code null} when it has
 * none.
 */
@FunctionalInterface
public interface RecordEventTime {
  /** The event time (epoch ms) of {@code record}, {@code null} when it has none. */
  Long of(ConsumerRecord<byte[], byte[]> record);

  /** The Kafka timestamp; {@code null} for none ({@code NO_TIMESTAMP_TYPE}, or negative). */
  static RecordEventTime kafkaTimestamp() {
    return record ->
        record.timestampType() != TimestampType.NO_TIMESTAMP_TYPE && record.timestamp() >= 0
            ? record.timestamp()
            : null;
  }

  /**
   * The event time of a source's options: {@link #kafkaTimestamp()}, or {@link #field} decoded as
   * the tasks decode the stream's {@code encoding} (single-object, or Confluent's framing with the
   * writer schema from {@code schemaRegistry.*}).
   *
   * @throws IllegalArgumentException {@code confluent} with {@code schemaRegistry.*} options the
   *     registry client refuses
   */
  static RecordEventTime of(SourceOptions options) {
    if (!options.timestampMode.equals("data_source")) {
      return kafkaTimestamp();
    }
    SchemaRepository repository = new SchemaRepository(options.schemasJson);
    Schema schema = repository.get(options.schemaName);
    String name = options.timestampField;
    if (name == null || schema.getField(name) == null) {
      return record -> null;
    }
    List<String> fields = List.of(name);
    int[] ordinals = {0};
    if (!options.encoding.equals("confluent")) {
      return field(
          new TupleDecoder(options.stream, schema, repository, fields, ordinals), schema, name);
    }
    // Confluent's subject is <topic>-value: one decoder per topic read.
    Map<String, RecordEventTime> byTopic = new HashMap<>();
    SchemaRegistryClient registry = SchemaRegistryClient.shared(options.schemaRegistry);
    return record ->
        byTopic
            .computeIfAbsent(
                record.topic(),
                topic ->
                    field(
                        new ConfluentDecoder(
                            options.stream, topic, schema, registry, fields, ordinals),
                        schema,
                        name))
            .of(record);
  }

  /**
   * The field {@code name} of each tuple, decoded alone (Avro's resolution skips the other fields):
   * an {@code int} or {@code long} as epoch ms, a {@code timestamp-millis} or {@code
   * timestamp-micros} as epoch ms (floored), as the tasks read {@code timestampField}; {@code null}
   * when the tuple does not decode ({@link TupleRejected}), the field is null, or it is no whole
   * number (a field whose Avro type is no {@code int} or {@code long}, such as a {@code double},
   * gives no event time for any tuple).
   *
   * @param decoder a decoder of the stream's field {@code name} alone, into ordinal 0
   * @param schema the stream's Avro schema
   * @param name option {@code timestampField}
   * @return a reader, not thread-safe (one decoder)
   */
  static RecordEventTime field(TupleDecoder decoder, Schema schema, String name) {
    Schema.Field field = schema.getField(name);
    Schema type = field == null ? null : nonNull(field.schema());
    if (type == null || (type.getType() != Schema.Type.INT && type.getType() != Schema.Type.LONG)) {
      return record -> null;
    }
    String logical = type.getProp("logicalType");
    boolean micros =
        type.getType() == Schema.Type.LONG
            && ("timestamp-millis".equals(logical) || "timestamp-micros".equals(logical));
    GenericInternalRow row = new GenericInternalRow(1);
    return record -> {
      row.setNullAt(0);
      try {
        decoder.decode(record.value(), row);
      } catch (TupleRejected e) {
        return null;
      }
      if (row.isNullAt(0)) {
        return null;
      }
      long raw = ((Number) row.genericGet(0)).longValue();
      return micros ? Math.floorDiv(raw, 1000L) : raw;
    };
  }

  /** The one non-null branch of a nullable union, else the schema itself ({@code null}: none). */
  private static Schema nonNull(Schema schema) {
    if (schema.getType() != Schema.Type.UNION) {
      return schema;
    }
    Schema kept = null;
    for (Schema branch : schema.getTypes()) {
      if (branch.getType() != Schema.Type.NULL) {
        if (kept != null) {
          return null;
        }
        kept = branch;
      }
    }
    return kept;
  }
}
