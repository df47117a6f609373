package io.floodgate.spark.read;

import io.floodgate.spark.KafkaClients;
import io.floodgate.spark.SourceOptions;
import io.floodgate.spark.deadletter.DeadLetterWriter;
import io.floodgate.spark.serde.ConfluentDecoder;
import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import io.floodgate.spark.serde.TupleRejected;
import io.floodgate.spark.swept.DataLossException;
import io.floodgate.spark.swept.SweepCatalogReader;
import io.floodgate.spark.swept.SweptRanges;
import io.floodgate.spark.swept.SweptRecords;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one task's {@link KafkaRange}s, one after the other, into the source's rows: each range
 * through a pooled consumer of its partition ({@link ConsumerPool}), decoded by a {@link
 * TupleDecoder}; a tuple that does not decode, or that a {@link RefusalRules} rule refuses, is
 * dead-lettered at the end of the task ({@link DeadLetterWriter}), and the task goes on.
 *
 * <p>Offsets the broker no longer holds fail the task ({@code failOnDataLoss}, the default), or are
 * skipped with a {@code FG-SOURCE-004} warning, as Spark's Kafka source does. With a sweep catalog
 * ({@code sweepCatalog}), offsets below the broker's log start are read from the swept BLOBs first
 * ({@link SweptRanges}), as the Python source's {@code read_partition} does.
 */
public final class RangeReader implements PartitionReader<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(RangeReader.class);

  /**
   * How long one poll waits for records before the reader checks its position. Short: a range that
   * ends at the log's end (a run's last micro-batch) has nothing past its end to fetch, and at 200
   * ms a poll its last micro-batch took 0.6-0.7 s longer than the others in bench_latency.py
   * (1.3-1.4 s for 13 000 rows against 0.7 s for 22 000); at 20 ms it takes no longer. A poll
   * returns as soon as records come, so nothing waits on it while data flows.
   */
  static final long POLL_MS = 20;

  /** A range that makes no progress for this long fails the task. */
  static final long READ_STALL_TIMEOUT_MS = 60_000;

  /** Consumer properties of range reads; the user's {@code kafka.*} options win. */
  static final Map<String, String> RANGE_CONSUMER =
      Map.of(
          "fetch.max.wait.ms", "10",
          "max.poll.records", "10000",
          "max.partition.fetch.bytes", "8388608");

  private final SourceOptions options;
  private final KafkaRange[] ranges;
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
  private final DeadLetterWriter dead;
  private final Properties consumerProperties;
  private final GenericInternalRow row;
  private final SourceAccumulators metrics;
  private final Configuration hadoopConf;

  private int rangeIndex = -1;
  private KafkaRange range;
  private KafkaConsumer<byte[], byte[]> consumer;
  private Iterator<ConsumerRecord<byte[], byte[]>> fetched = java.util.Collections.emptyIterator();
  private boolean rangeDone = true;
  private long rowsRead;
  private SweptRanges swept;
  private SweptRecords sweptRecords;
  private long sweptRead;

  RangeReader(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      KafkaRange[] ranges,
      SourceAccumulators metrics,
      Configuration hadoopConf) {
    this.options = options;
    this.hadoopConf = hadoopConf;
    this.ranges = ranges;
    this.layout = layout;
    this.metrics = metrics;
    this.row = new GenericInternalRow(schema.fields().length);
    if (options.decoded()) {
      this.repository = new SchemaRepository(options.schemasJson);
      this.avro = repository.get(options.schemaName);
      if (ranges.length > 0) { // the options' refusals at once, not at the first tuple
        decoder(ranges[0].topic());
        keyDecoder(ranges[0].topic());
      }
    } else {
      this.repository = null;
      this.avro = null;
    }
    this.keyFieldCount = avro != null && layout.decodesKey() ? options.keyFields.size() : 0;
    this.rules = new RefusalRules(options);
    this.dead =
        new DeadLetterWriter(
            options.deadLetterTopic, KafkaClients.producer(options), options.stream, options.query);
    this.consumerProperties = KafkaClients.consumer(options, RANGE_CONSUMER);
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

  @Override
  public boolean next() {
    while (true) {
      if (rangeDone) {
        if (!nextRange()) {
          return false;
        }
      }
      while (fetched.hasNext()) {
        ConsumerRecord<byte[], byte[]> record = fetched.next();
        if (record.offset() >= range.end()) {
          rangeDone = true;
          break;
        }
        if (record.offset() < range.start()) {
          continue;
        }
        if (toRow(record)) {
          rowsRead++;
          return true;
        }
      }
      if (!rangeDone) {
        poll();
      }
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() {
    try {
      if (!rangeDone && consumer != null) {
        // The task ends inside a range: it failed, was killed, or Spark stopped early. A
        // consumer left mid-fetch, or by an exception, is closed, not pooled, as Spark's
        // KafkaDataConsumer does for a failed or interrupted task. The dead letters below are
        // sent whatever this close throws.
        KafkaConsumer<byte[], byte[]> unfinished = consumer;
        consumer = null;
        try {
          unfinished.close(Duration.ZERO);
        } catch (RuntimeException e) {
          LOG.warn("closing the consumer of an unfinished range failed", e);
        }
      }
      finishRange();
      Long batch = ranges.length > 0 ? ranges[0].batchId() : null;
      int refused = dead.size();
      dead.send(batch);
      if (metrics != null) {
        metrics.deadLettered().add(refused);
        metrics.rowsRead().add(rowsRead);
        metrics.sweptRead().add(sweptRead);
      }
    } finally {
      if (consumer != null) {
        consumer.close(Duration.ZERO);
        consumer = null;
      }
    }
  }

  private boolean nextRange() {
    finishRange();
    rangeIndex++;
    if (rangeIndex >= ranges.length) {
      return false;
    }
    range = ranges[rangeIndex];
    consumer = ConsumerPool.acquire(consumerProperties, range.topic(), range.partition());
    TopicPartition tp = new TopicPartition(range.topic(), range.partition());
    consumer.assign(List.of(tp));
    long start = range.start();
    if (!options.failOnDataLoss) {
      start = pastLost(tp);
    }
    fetched = java.util.Collections.emptyIterator();
    if (options.sweepCatalog != null) {
      start = unsweep(tp, start, consumer.beginningOffsets(List.of(tp)).get(tp));
    }
    consumer.seek(tp, start);
    rangeDone = start >= range.end() && !fetched.hasNext();
    return true;
  }

  private void finishRange() {
    endSwept();
    if (consumer != null && range != null) {
      ConsumerPool.release(consumerProperties, range.topic(), range.partition(), consumer);
      consumer = null;
    }
  }

  /** {@code range.start}, or the low watermark past it (failOnDataLoss = false). */
  private long pastLost(TopicPartition tp) {
    long low = consumer.beginningOffsets(List.of(tp)).get(tp);
    if (range.start() >= low) {
      return range.start();
    }
    LOG.warn(
        "FG-SOURCE-004 source {}: offsets [{}, {}) of {}[{}] are no longer on the broker and are"
            + " skipped (failOnDataLoss = false)",
        options.stream,
        range.start(),
        Math.min(low, range.end()),
        range.topic(),
        range.partition());
    return Math.min(low, range.end());
  }

  private void poll() {
    TopicPartition tp = new TopicPartition(range.topic(), range.partition());
    if (sweptRecords != null && consumer.position(tp) >= range.end()) {
      rangeDone = true; // the rest of the range came from BLOBs
      return;
    }
    long deadline = System.currentTimeMillis() + READ_STALL_TIMEOUT_MS;
    while (true) {
      ConsumerRecords<byte[], byte[]> records;
      try {
        records = consumer.poll(Duration.ofMillis(POLL_MS));
      } catch (OffsetOutOfRangeException e) {
        if (options.sweepCatalog != null) {
          // Swept while this range was reading: BLOBs hold the rest up to the log start.
          long from = e.offsetOutOfRangePartitions().getOrDefault(tp, consumer.position(tp));
          long low = consumer.beginningOffsets(List.of(tp)).get(tp);
          if (from < low) {
            consumer.seek(tp, unsweep(tp, from, low));
            return;
          }
        }
        long next = consumer.position(tp, Duration.ofSeconds(30));
        long low = consumer.beginningOffsets(List.of(tp)).get(tp);
        DataLossException lost =
            new DataLossException(
                "the broker no longer holds offset "
                    + next
                    + " (log start "
                    + low
                    + "; retention or delete-records) and no BLOB holds it. Set failOnDataLoss"
                    + " = false to skip such offsets, as Spark's Kafka source allows",
                range.topic(),
                range.partition(),
                next,
                range.end(),
                low);
        lost.initCause(e);
        throw lost;
      }
      List<ConsumerRecord<byte[], byte[]>> got = records.records(tp);
      if (!got.isEmpty()) {
        fetched = got.iterator();
        return;
      }
      // Transaction markers and aborted records take offsets but yield no record.
      if (consumer.position(tp) >= range.end()) {
        rangeDone = true;
        return;
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException(
            "reading "
                + tp
                + " ["
                + range.start()
                + ", "
                + range.end()
                + ") made no progress for "
                + READ_STALL_TIMEOUT_MS / 1000
                + " s at offset "
                + consumer.position(tp));
      }
    }
  }

  /**
   * With a sweep catalog, the records of {@code [from, min(range end, low))} come from the BLOB
   * chain: {@link #fetched} is set to them (counted in {@code sweptRead}).
   *
   * @param low the broker's log start offset
   * @return the offset to read the broker from
   * @throws io.floodgate.spark.swept.DataLossException {@code from} is below {@code low} and in no
   *     BLOB
   */
  private long unsweep(TopicPartition tp, long from, long low) {
    if (from >= low) {
      return from;
    }
    if (swept == null) {
      swept = new SweptRanges(new SweepCatalogReader(options.sweepCatalog), hadoopConf);
    }
    endSwept();
    sweptRecords = swept.read(tp.topic(), tp.partition(), from, range.end(), low);
    fetched = sweptRecords;
    return sweptRecords.brokerFrom();
  }

  private void endSwept() {
    if (sweptRecords != null) {
      sweptRead += sweptRecords.count();
      sweptRecords.close();
      sweptRecords = null;
    }
  }

  /** Fill {@link #row} from {@code record}; {@code false} when it is dead-lettered instead. */
  private boolean toRow(ConsumerRecord<byte[], byte[]> record) {
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
        dead.add(record, e);
        return false;
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
          dead.add(
              record,
              new TupleRejected(
                  "bad-key", "the key does not decode (" + e.reason() + "): " + e.detail(), e));
          return false;
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
          dead.add(record, refusal);
          return false;
        }
      }
    }
    RowLayout.Column[] columns = layout.columns;
    for (int i = 0; i < columns.length; i++) {
      switch (columns[i]) {
        case FIELD:
          break;
        case SKIPPED_FIELD:
          row.setNullAt(i);
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
    return true;
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
