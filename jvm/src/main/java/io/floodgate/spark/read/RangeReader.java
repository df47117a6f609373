package io.floodgate.spark.read;

import io.floodgate.spark.KafkaClients;
import io.floodgate.spark.RealTimeEnds;
import io.floodgate.spark.RealTimeReads;
import io.floodgate.spark.SourceOptions;
import io.floodgate.spark.deadletter.DeadLetterWriter;
import io.floodgate.spark.offsets.KafkaPartitionOffset;
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
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.TimestampType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
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
 * skipped with a {@code FG-SOURCE-004} warning, wherever the range meets them, as Spark's {@code
 * KafkaDataConsumer} does: below the log start when the range starts, an out-of-range answer in the
 * middle of the range, or a range whose end lies past the log's end (the topic deleted and created
 * again, or truncated, since the range was planned). What is skipped is counted ({@code
 * offsetOutOfRange}: offsets, {@code dataLoss}: times), with the rows read, the tuples
 * dead-lettered and those read from BLOBs, in the task's metrics ({@link #currentMetricsValues},
 * {@link TaskMetrics}). With a sweep catalog ({@code sweepCatalog}), offsets below the broker's log
 * start are read from the swept BLOBs first ({@link SweptRanges}), as the Python reader of swept
 * BLOBs does ({@code pipeline.swept.reading.read_partition}).
 *
 * <p>A consumer goes back to the pool only after its range was read to the end, or to a real-time
 * batch's deadline; one that stopped inside a range, or whose range failed to start, is closed.
 *
 * <p>In Spark's Real-Time Mode the task's one range has no end ({@link
 * io.floodgate.spark.RealTimeMode}): Spark calls {@link #nextWithTimeout} with the time left until
 * the batch's deadline, the reader waits for records until then, and {@link #getOffset} says where
 * it stopped. An idle partition is no stall there: nothing fails a range for making no progress.
 */
public final class RangeReader implements SupportsRealTimeRead<InternalRow> {
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

  /**
   * While a range makes no progress, how often the reader asks the broker which offsets it holds
   * (two requests), to tell a gap (the range's offsets gone: data loss) from a broker that is slow
   * to answer. Asked after two polls in a row return nothing at the same position: the first poll
   * after a seek may return before its fetch does.
   */
  static final long AVAILABLE_CHECK_MS = 1_000;

  /**
   * What a data-loss failure tells the user, as Spark's {@code INSTRUCTION_FOR_FAIL_ON_DATA_LOSS}.
   */
  static final String FAIL_HINT =
      "Some data may have been lost. Set failOnDataLoss = false to skip such offsets and go on, as"
          + " Spark's Kafka source allows";

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
  private final RangeConsumers consumers;
  private final GenericInternalRow row;
  private final Configuration hadoopConf;

  private int rangeIndex = -1;
  private KafkaRange range;
  private Consumer<byte[], byte[]> consumer;
  private Iterator<ConsumerRecord<byte[], byte[]>> fetched = java.util.Collections.emptyIterator();
  private boolean rangeDone = true;
  private long rowsRead;
  private SweptRanges swept;
  private SweptRecords sweptRecords;
  private long sweptRead;

  /** Tuples dead-lettered (sent when the reader closes). */
  private long deadLettered;

  /** Offsets skipped as lost ({@code failOnDataLoss = false}). */
  private long offsetOutOfRange;

  /** Times offsets were found lost and skipped. */
  private long dataLoss;

  /**
   * A real-time batch's deadline (epoch ms, this JVM's clock); {@code Long.MAX_VALUE}: a
   * micro-batch's or a batch query's range, read to its end.
   */
  private long deadlineMs = Long.MAX_VALUE;

  /** The last poll found the real-time batch's deadline passed. */
  private boolean deadlineReached;

  /** The next offset of the current range to read: the last record taken, plus one. */
  private long nextOffset;

  /** The offset of the record the last row came from; -1 before the first. */
  private long lastRowOffset = -1;

  /** Whether this real-time reader told its task's sink where it stands ({@link RealTimeReads}). */
  private boolean registered;

  /** Polls in a row that returned nothing at the same position. */
  private int stalledPolls;

  /** When the reader last asked the broker which offsets it holds (ms since the epoch). */
  private long availableCheckedMs;

  RangeReader(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      KafkaRange[] ranges,
      Configuration hadoopConf) {
    this(options, schema, layout, ranges, hadoopConf, null);
  }

  /**
   * @param consumers where each range's consumer comes from; {@code null}: the executor's pool
   */
  RangeReader(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      KafkaRange[] ranges,
      Configuration hadoopConf,
      RangeConsumers consumers) {
    this.options = options;
    this.hadoopConf = hadoopConf;
    this.ranges = ranges;
    this.layout = layout;
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
    Properties consumerProperties = KafkaClients.consumer(options, RANGE_CONSUMER);
    this.consumers = consumers != null ? consumers : RangeConsumers.pooled(consumerProperties);
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
        nextOffset = record.offset() + 1;
        if (toRow(record)) {
          rowsRead++;
          lastRowOffset = record.offset();
          return true;
        }
      }
      if (!rangeDone) {
        poll();
        if (deadlineReached) {
          return false;
        }
      }
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  /**
   * The next row of a real-time batch, waiting for one at most {@code timeoutMs} (the time left
   * until the batch's deadline, which Spark's {@code LowLatencyReaderWrap} computes from {@code
   * startTimeMs}); no row: the deadline passed, and the task ends. Overridden in this form, which
   * Spark 4.2 declares abstract and 4.3 calls.
   */
  @Override
  public RecordStatus nextWithTimeout(Long startTimeMs, Long timeoutMs) {
    if (RealTimeEnds.take()) {
      // The sink has no room for more: the task ends here, at the next offset to read.
      deadlineReached = true;
      return RecordStatus.newStatusWithoutArrivalTime(false);
    }
    if (!registered) {
      registered = true;
      RealTimeReads.register(new Standing());
    }
    deadlineMs = System.currentTimeMillis() + Math.max(0, timeoutMs);
    deadlineReached = false;
    return RecordStatus.newStatusWithoutArrivalTime(next());
  }

  /**
   * Where the task's range stands: the next offset to read, past the transaction markers and
   * aborted records the consumer stepped over; the range's start when nothing was read. Spark reads
   * it once, when the reader returns no row at a real-time batch's deadline.
   */
  @Override
  public KafkaPartitionOffset getOffset() {
    if (range == null) {
      // Never read: the task began after the deadline (a retry), so it stands at its start.
      if (ranges.length == 0) {
        throw new IllegalStateException("a real-time task with no range: nothing was planned");
      }
      return new KafkaPartitionOffset(ranges[0].topic(), ranges[0].partition(), ranges[0].start());
    }
    long next = nextOffset;
    if (!fetched.hasNext() && consumer != null && sweptRecords == null) {
      next =
          Math.max(next, consumer.position(new TopicPartition(range.topic(), range.partition())));
    }
    return new KafkaPartitionOffset(range.topic(), range.partition(), next);
  }

  @Override
  public void close() {
    RealTimeEnds.clear();
    if (registered) {
      RealTimeReads.unregister();
    }
    try {
      if (!rangeDone && !deadlineReached && consumer != null) {
        // The task ends inside a range: it failed, was killed, or Spark stopped early. A
        // consumer left mid-fetch, or by an exception, is closed, not pooled, as Spark's
        // KafkaDataConsumer does for a failed or interrupted task. The dead letters below are
        // sent whatever this close throws.
        discardConsumer();
      }
      finishRange();
      dead.send(ranges.length > 0 ? ranges[0].batchId() : null);
    } finally {
      if (consumer != null) {
        discardConsumer();
      }
    }
  }

  /** Where this real-time reader stands, for the sink of its task ({@link RealTimeReads}). */
  private final class Standing implements RealTimeReads.Position {
    @Override
    public TopicPartition inputPartition() {
      KafkaPartitionOffset at = getOffset();
      return new TopicPartition(at.topic(), at.partition());
    }

    @Override
    public long lastRowOffset() {
      return lastRowOffset;
    }

    @Override
    public long nextOffset() {
      return getOffset().offset();
    }
  }

  /**
   * The task's counts so far ({@link TaskMetrics}). Spark asks as rows are read and once more when
   * {@link #next} returns {@code false}, before {@link #close}: the tuples dead-lettered are
   * counted as they are refused, though they are sent when the reader closes (a send that fails
   * fails the task, and Spark keeps no metric of a failed task).
   */
  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    long swept = sweptRead + (sweptRecords == null ? 0 : sweptRecords.count());
    return new CustomTaskMetric[] {
      TaskMetrics.value(TaskMetrics.ROWS_READ, rowsRead),
      TaskMetrics.value(TaskMetrics.DEAD_LETTERED, deadLettered),
      TaskMetrics.value(TaskMetrics.SWEPT_READ, swept),
      TaskMetrics.value(TaskMetrics.OFFSET_OUT_OF_RANGE, offsetOutOfRange),
      TaskMetrics.value(TaskMetrics.DATA_LOSS, dataLoss)
    };
  }

  /** Close {@link #consumer} instead of pooling it; a failure to close is logged. */
  private void discardConsumer() {
    Consumer<byte[], byte[]> unfinished = consumer;
    consumer = null;
    try {
      consumers.discard(unfinished);
    } catch (RuntimeException e) {
      LOG.warn("closing the consumer of an unfinished range failed", e);
    }
  }

  private boolean nextRange() {
    finishRange();
    rangeIndex++;
    if (rangeIndex >= ranges.length) {
      return false;
    }
    range = ranges[rangeIndex];
    TopicPartition tp = new TopicPartition(range.topic(), range.partition());
    consumer = consumers.acquire(tp);
    try {
      startRange(tp);
    } catch (RuntimeException e) {
      // Not pooled: the next task would get a consumer in whatever state this one failed in.
      discardConsumer();
      throw e;
    }
    return true;
  }

  /** Assign {@link #consumer} to {@code tp} and seek to where {@link #range} starts. */
  private void startRange(TopicPartition tp) {
    consumer.assign(List.of(tp));
    stalledPolls = 0;
    if (range.endAtLatest()) {
      range = range.withEnd(latestEnd(tp));
    }
    long start = range.start();
    if (!options.failOnDataLoss) {
      start = pastLost(tp);
    }
    nextOffset = start;
    fetched = java.util.Collections.emptyIterator();
    if (options.sweepCatalog != null) {
      start = unsweep(tp, start, consumer.beginningOffsets(List.of(tp)).get(tp));
    }
    consumer.seek(tp, start);
    rangeDone = start >= range.end() && !fetched.hasNext();
  }

  /**
   * Where a range planned to {@code latest} ends now: the partition's last stable offset when the
   * task runs. Below the range's start (the topic deleted and created again, or truncated, since
   * the planning), that is data loss, as in {@link #skipLost}: the range is then empty.
   */
  private long latestEnd(TopicPartition tp) {
    long latest = consumer.endOffsets(List.of(tp)).get(tp);
    if (latest >= range.start()) {
      return latest;
    }
    String what =
        "the partition's offsets went back from "
            + range.start()
            + " to "
            + latest
            + " (its topic deleted and created again, or truncated) since the query was planned";
    if (options.failOnDataLoss) {
      throw new DataLossException(
          what + ". " + FAIL_HINT, tp.topic(), tp.partition(), range.start(), range.end(), null);
    }
    dataLoss++;
    LOG.warn(
        "FG-SOURCE-004 source {}: {}[{}]: {}: nothing is read (failOnDataLoss = false)",
        options.stream,
        tp.topic(),
        tp.partition(),
        what);
    return range.start();
  }

  private void finishRange() {
    endSwept();
    if (consumer != null && range != null) {
      consumers.release(new TopicPartition(range.topic(), range.partition()), consumer);
      consumer = null;
    }
  }

  /** {@code range.start}, or the low watermark past it (failOnDataLoss = false). */
  private long pastLost(TopicPartition tp) {
    long low = consumer.beginningOffsets(List.of(tp)).get(tp);
    if (range.start() >= low) {
      return range.start();
    }
    dataLoss++;
    offsetOutOfRange += Math.min(low, range.end()) - range.start();
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
      if (System.currentTimeMillis() >= deadlineMs) {
        deadlineReached = true; // a real-time batch's end: where it stands is getOffset()
        return;
      }
      long before = consumer.position(tp);
      ConsumerRecords<byte[], byte[]> records;
      try {
        records = consumer.poll(Duration.ofMillis(POLL_MS));
      } catch (OffsetOutOfRangeException e) {
        long from = e.offsetOutOfRangePartitions().getOrDefault(tp, before);
        long low = consumer.beginningOffsets(List.of(tp)).get(tp);
        if (options.sweepCatalog != null && from < low) {
          // Swept while this range was reading: BLOBs hold the rest up to the log start.
          consumer.seek(tp, unsweep(tp, from, low));
          return;
        }
        long next = skipLost(tp, from, low, consumer.endOffsets(List.of(tp)).get(tp), e);
        if (next >= range.end()) {
          rangeDone = true;
          return;
        }
        if (next != from) { // progress; else the broker holds it again: the deadline stands
          deadline = System.currentTimeMillis() + READ_STALL_TIMEOUT_MS;
        }
        consumer.seek(tp, next);
        continue;
      }
      List<ConsumerRecord<byte[], byte[]>> got = records.records(tp);
      if (!got.isEmpty()) {
        stalledPolls = 0;
        fetched = got.iterator();
        return;
      }
      // Transaction markers and aborted records take offsets but yield no record.
      long position = consumer.position(tp);
      if (position >= range.end()) {
        rangeDone = true;
        return;
      }
      stalledPolls = position == before ? stalledPolls + 1 : 0;
      long now = System.currentTimeMillis();
      if (stalledPolls >= 2 && now - availableCheckedMs >= AVAILABLE_CHECK_MS) {
        availableCheckedMs = now;
        long low = consumer.beginningOffsets(List.of(tp)).get(tp);
        long high = consumer.endOffsets(List.of(tp)).get(tp);
        // A range's end lies past the log's end: the offsets it needs are gone. A real-time
        // range has no end, and a position at the log's end is where it waits for more.
        boolean pastEnd = deadlineMs == Long.MAX_VALUE ? position >= high : position > high;
        if (position < low || pastEnd) {
          long next = skipLost(tp, position, low, high, null);
          if (next >= range.end()) {
            rangeDone = true;
            return;
          }
          consumer.seek(tp, next);
          stalledPolls = 0;
          deadline = now + READ_STALL_TIMEOUT_MS;
          continue;
        }
      }
      if (now > deadline && deadlineMs == Long.MAX_VALUE) {
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
                + position);
      }
    }
  }

  /**
   * The broker holds {@code [low, high)} of {@code tp} and the range needs {@code from}, which it
   * does not hold, or did not a moment ago: where to go on, as Spark's {@code
   * KafkaDataConsumer.getEarliestAvailableOffsetBetween}: the range's end when what is left of it
   * and what the broker holds do not meet (the log ends below {@code from}: deleted and created
   * again, or truncated), {@code low} when the log now starts inside the range (retention or {@code
   * DeleteRecords} passed {@code from}), {@code from} itself when the broker holds it again (a
   * topic created again and written past it meanwhile).
   *
   * @param cause the out-of-range error of a poll, or {@code null} (the reader found the gap)
   * @return the next offset to read; the range's end: nothing left to read
   * @throws DataLossException with {@code failOnDataLoss} (the default): naming the partition, the
   *     offsets lost and those the broker holds
   */
  private long skipLost(TopicPartition tp, long from, long low, long high, Exception cause) {
    long until = range.end();
    long next;
    if (from >= high || low >= until) {
      next = until;
    } else if (from >= low) {
      next = from;
    } else {
      next = low;
    }
    String held = "the broker holds [" + low + ", " + high + ")";
    if (options.failOnDataLoss) {
      DataLossException lost =
          new DataLossException(
              "the broker no longer holds offset "
                  + from
                  + " ("
                  + held
                  + "; retention, delete-records, or the topic deleted or truncated)"
                  + (options.sweepCatalog != null ? " and no BLOB holds it" : "")
                  + ". "
                  + FAIL_HINT,
              range.topic(),
              range.partition(),
              from,
              until,
              low);
      lost.initCause(cause);
      throw lost;
    }
    if (next == from) {
      LOG.warn(
          "FG-SOURCE-004 source {}: offset {} of {}[{}] was out of range and is held again ({});"
              + " some tuples may be lost (failOnDataLoss = false)",
          options.stream,
          from,
          range.topic(),
          range.partition(),
          held);
      dataLoss++;
      return next;
    }
    LOG.warn(
        "FG-SOURCE-004 source {}: offsets [{}, {}) of {}[{}] are no longer on the broker ({}) and"
            + " are skipped (failOnDataLoss = false)",
        options.stream,
        from,
        next,
        range.topic(),
        range.partition(),
        held);
    dataLoss++;
    offsetOutOfRange += next - from;
    return next;
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
        deadLetter(record, e);
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
          deadLetter(
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
          deadLetter(record, refusal);
          return false;
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
    return true;
  }

  /** Keep {@code record} for the dead-letter topic, counted in {@code deadLettered}. */
  private void deadLetter(ConsumerRecord<byte[], byte[]> record, TupleRejected why) {
    dead.add(record, why);
    deadLettered++;
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
