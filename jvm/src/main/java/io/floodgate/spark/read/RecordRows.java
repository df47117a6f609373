package io.floodgate.spark.read;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.ConfluentDecoder;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import io.floodgate.spark.serde.TupleRejected;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A Kafka record as one of the source's rows, in the columns of its {@link RowLayout}: Spark's
 * Kafka columns ({@code key}, {@code value}, {@code topic}, {@code partition}, {@code offset},
 * {@code timestamp}, {@code timestampType}, {@code headers}, as Spark's {@code
 * KafkaRecordToRowConverter} fills them) and, with option {@code schema}, the tuple's decoded
 * fields ({@link TupleDecoder}, a decoder per topic), its decoded key ({@code keyEncoding =
 * confluent}) and its event time.
 *
 * <p>A tuple that does not decode, or that a {@link RefusalRules} rule refuses, fills no row:
 * {@link #toRow} returns why, and the reader dead-letters it. The decoders' refusals of the options
 * are thrown when the reader is made ({@link #check}), not at the first tuple.
 */
final class RecordRows {
  private final SourceOptions options;
  private final RowLayout layout;

  /** The stream's schema and writer schemas ({@code null}: raw columns, nothing decoded). */
  private final Schema avro;

  private final SchemaRepository repository;

  /**
   * The value decoder per topic ({@code encoding = confluent}: the subject is {@code
   * <topic>-value}); empty when nothing is decoded.
   */
  private final Map<String, TupleDecoder> decoders = new HashMap<>();

  /** The key record's decoder per topic of {@code keyEncoding = confluent}; empty: raw keys. */
  private final Map<String, ConfluentDecoder> keyDecoders = new HashMap<>();

  private final int keyFieldCount;
  private final RefusalRules rules;
  private final GenericInternalRow row;

  RecordRows(SourceOptions options, StructType schema, RowLayout layout) {
    this.options = options;
    this.layout = layout;
    this.row = new GenericInternalRow(schema.fields().length);
    if (options.decoded()) {
      this.repository = new SchemaRepository(options.schemasJson);
      this.avro = repository.get(options.schemaName);
    } else {
      this.repository = null;
      this.avro = null;
    }
    this.keyFieldCount = avro != null && layout.decodesKey() ? options.keyFields.size() : 0;
    this.rules = new RefusalRules(options);
  }

  /**
   * Make {@code topic}'s decoders now, so that their refusals of the options come at once.
   *
   * @throws IllegalArgumentException the options name no decoder that can read the topic
   */
  void check(String topic) {
    decoder(topic);
    keyDecoder(topic);
  }

  /** The row {@link #toRow} fills, one for every record. */
  InternalRow row() {
    return row;
  }

  /** The value decoder of {@code topic}'s tuples; {@code null}: nothing is decoded. */
  private TupleDecoder decoder(String topic) {
    if (avro == null) {
      return null;
    }
    return decoders.computeIfAbsent(
        topic,
        t ->
            Decoders.forOptions(
                options, t, avro, repository, layout.decodedFields, layout.decodedOrdinals));
  }

  /** The key decoder of {@code topic}'s tuples; {@code null}: raw keys. */
  private ConfluentDecoder keyDecoder(String topic) {
    if (avro == null || !layout.decodesKey()) {
      return null;
    }
    return keyDecoders.computeIfAbsent(topic, t -> Decoders.forKey(options, t, avro));
  }

  /**
   * Fill {@link #row} from {@code record}, read in {@code range}.
   *
   * @return {@code null}; or why the tuple is dead-lettered instead: it does not decode, its key
   *     does not, or a {@link RefusalRules} rule refuses it
   */
  TupleRejected toRow(ConsumerRecord<byte[], byte[]> record, KafkaRange range) {
    Long timestampMs =
        record.timestampType() != TimestampType.NO_TIMESTAMP_TYPE && record.timestamp() >= 0
            ? record.timestamp()
            : null;
    Long eventTimeMs = timestampMs;
    InternalRow decodedKey = null;
    TupleDecoder decoder = decoder(record.topic());
    if (decoder != null) {
      for (int ordinal : layout.decodedOrdinals) {
        row.setNullAt(ordinal);
      }
      try {
        decoder.decode(record.value(), row);
      } catch (TupleRejected e) {
        return e;
      }
      if (options.timestampMode.equals("data_source")) {
        int ts = layout.timestampFieldOrdinal;
        if (ts < 0 || row.isNullAt(ts)) {
          eventTimeMs = null;
        } else if (layout.timestampFieldIsMicros) {
          eventTimeMs = Math.floorDiv(row.getLong(ts), 1000L);
        } else {
          eventTimeMs = ((Number) row.genericGet(ts)).longValue();
        }
      }
      ConfluentDecoder keyDecoder = keyDecoder(record.topic());
      if (keyDecoder != null && record.key() != null) {
        decodedKey = new GenericInternalRow(keyFieldCount);
        try {
          keyDecoder.decode(record.key(), decodedKey);
        } catch (TupleRejected e) {
          return new TupleRejected(
              "bad-key", "the key does not decode (" + e.reason() + "): " + e.detail(), e);
        }
      }
      if (!rules.none(range.watermarkMs())) {
        TupleRejected refusal =
            rules.refusal(
                record.key() != null,
                timestampMs,
                eventTimeMs,
                range.watermarkMs(),
                range.batchId());
        if (refusal != null) {
          return refusal;
        }
      }
    }
    RowLayout.Column[] columns = layout.columns;
    for (int i = 0; i < columns.length; i++) {
      switch (columns[i]) {
        case FIELD:
          break;
        case EVENT_TIME:
          setMicros(i, eventTimeMs);
          break;
        case KEY:
          row.update(i, record.key());
          break;
        case DECODED_KEY:
          row.update(i, decodedKey);
          break;
        case PARTITION:
          row.setInt(i, record.partition());
          break;
        case OFFSET:
          row.setLong(i, record.offset());
          break;
        case TIMESTAMP:
          setMicros(i, timestampMs);
          break;
        case VALUE:
          row.update(i, record.value());
          break;
        case TOPIC:
          row.update(i, UTF8String.fromString(record.topic()));
          break;
        case TIMESTAMP_TYPE:
          row.setInt(i, record.timestampType().id);
          break;
        case HEADERS:
          row.update(i, headers(record));
          break;
        default:
          throw new IllegalStateException("column " + columns[i]);
      }
    }
    return null;
  }

  private void setMicros(int ordinal, Long epochMs) {
    if (epochMs == null) {
      row.setNullAt(ordinal);
    } else {
      row.setLong(ordinal, epochMs * 1000L);
    }
  }

  /** Spark's {@code headers} column: {@code [{key, value}]} in order, null without headers. */
  private static GenericArrayData headers(ConsumerRecord<byte[], byte[]> record) {
    Header[] all = record.headers().toArray();
    if (all.length == 0) {
      return null;
    }
    List<Object> out = new ArrayList<>(all.length);
    for (Header h : all) {
      out.add(
          new GenericInternalRow(
              new Object[] {
                UTF8String.fromBytes(h.key().getBytes(StandardCharsets.UTF_8)), h.value()
              }));
    }
    return new GenericArrayData(out.toArray());
  }
}
