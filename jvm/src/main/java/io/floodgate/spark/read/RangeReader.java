package io.floodgate.spark.read;

import io.floodgate.spark.deadletter.DeadLetterWriter;
import io.floodgate.spark.kafka.KafkaClients;
import io.floodgate.spark.offsets.KafkaPartitionOffset;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.TupleDecoder;
import io.floodgate.spark.serde.TupleRejected;
import io.floodgate.spark.swept.SweptRanges;
import io.floodgate.spark.swept.SweptRecords;
import java.time.Duration;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
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
 * io.floodgate.spark.RealTimeMode}), or the end of a batch run again: {@link RealTimeReader} reads
 * it until the batch's deadline ({@link #readUntil}) and says where it stopped ({@link #position}).
 * An idle partition is no stall there: nothing fails a range for making no progress.
 *
 * <p>Its parts: {@link RecordRows} (a record as a row, decoded), {@link LostOffsets} (offsets the
 * broker no longer holds), {@link SweptReads} (offsets read from BLOBs), {@link StallWatch} (a
 * range that makes no progress).
 */
public final class RangeReader implements PartitionReader<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(RangeReader.class);

  /**
   * How long one poll of a micro-batch's range waits for records before the reader checks its
   * position. Short: a range that ends at the log's end (a run's last micro-batch) has nothing past
   * its end to fetch, and at 200 ms a poll its last micro-batch took 0.6-0.7 s longer than the
   * others in bench_latency.py (1.3-1.4 s for 13 000 rows against 0.7 s for 22 000); at 20 ms it
   * takes no longer. A poll returns as soon as records come, so nothing waits on it while data
   * flows.
   */
  static final long POLL_MS = 20;

  /**
   * How long one poll of a real-time range waits for records at most: the time left until the
   * batch's deadline, as Spark's {@code KafkaDataConsumer} polls in Real-Time Mode, but no longer
   * than {@link StallWatch#AVAILABLE_CHECK_MS}, so that an idle range still asks the broker now and
   * then whether its offsets are gone. A poll returns as soon as records come, so this costs no
   * latency; a shorter one only wakes the task (and its consumer's bookkeeping) for nothing while
   * the partition is idle.
   */
  static final long REAL_TIME_POLL_MS = StallWatch.AVAILABLE_CHECK_MS;

  /** Consumer properties of range reads; the user's {@code kafka.*} options win. */
  static final Map<String, String> RANGE_CONSUMER =
      Map.of(
          "fetch.max.wait.ms", "10",
          "max.poll.records", "10000",
          "max.partition.fetch.bytes", "8388608");

  private final SourceOptions options;
  private final KafkaRange[] ranges;
  private final DeadLetterWriter dead;
  private final RangeConsumers consumers;

  /** The records as rows, decoded. */
  private final RecordRows rows;

  /** What the task does with offsets the broker no longer holds, and their counts. */
  private final LostOffsets lost;

  private int rangeIndex = -1;
  private KafkaRange range;
  private Consumer<byte[], byte[]> consumer;
  private Iterator<ConsumerRecord<byte[], byte[]>> fetched = java.util.Collections.emptyIterator();
  private boolean rangeDone = true;
  private long rowsRead;

  /** The records read from swept BLOBs ({@code sweepCatalog}). */
  private final SweptReads swept;

  /** Tuples dead-lettered (sent when the reader closes). */
  private long deadLettered;

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

  /** Whether the current range makes progress. */
  private final StallWatch stall = new StallWatch();

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
    this.swept = new SweptReads(options.sweepCatalog, hadoopConf);
    this.ranges = ranges;
    this.rows = new RecordRows(options, schema, layout);
    if (ranges.length > 0) { // the options' refusals at once, not at the first tuple
      rows.check(ranges[0].topic());
    }
    this.lost = new LostOffsets(options);
    this.dead =
        new DeadLetterWriter(
            options.deadLetterTopic, KafkaClients.producer(options), options.stream, options.query);
    Properties consumerProperties = KafkaClients.consumer(options, RANGE_CONSUMER);
    this.consumers = consumers != null ? consumers : RangeConsumers.pooled(consumerProperties);
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
        TupleRejected rejected = rows.toRow(record, range);
        if (rejected == null) {
          rowsRead++;
          lastRowOffset = record.offset();
          return true;
        }
        deadLetter(record, rejected);
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
    return rows.row();
  }

  /** Read on until {@code deadlineMs} (epoch ms), a real-time batch's deadline, at most. */
  void readUntil(long deadlineMs) {
    this.deadlineMs = deadlineMs;
    deadlineReached = false;
  }

  /** Stop here, as at a real-time batch's deadline: the consumer stays clean for the pool. */
  void stopAsAtDeadline() {
    deadlineReached = true;
  }

  /** Where the task's range ends ({@code Long.MAX_VALUE}: a real-time range with no end). */
  long rangeEnd() {
    return range != null ? range.end() : ranges.length > 0 ? ranges[0].end() : Long.MAX_VALUE;
  }

  /** The offset of the record the last row came from; -1 before the first. */
  long lastRowOffset() {
    return lastRowOffset;
  }

  /**
   * Where the task's range stands: the next offset to read, past the transaction markers and
   * aborted records the consumer stepped over; the range's start when nothing was read; a range
   * read to its end, its end.
   */
  KafkaPartitionOffset position() {
    if (range == null) {
      // Never read: the task began after the deadline (a retry), so it stands at its start.
      if (ranges.length == 0) {
        throw new IllegalStateException("a real-time task with no range: nothing was planned");
      }
      return new KafkaPartitionOffset(ranges[0].topic(), ranges[0].partition(), ranges[0].start());
    }
    long next = nextOffset;
    if (!fetched.hasNext() && consumer != null && !swept.reading()) {
      next =
          Math.max(next, consumer.position(new TopicPartition(range.topic(), range.partition())));
    }
    if (rangeDone && range.end() != Long.MAX_VALUE) {
      // A batch run again to where its first run stopped ends there, past the transaction
      // markers the first run stepped over too.
      next = Math.max(next, range.end());
    }
    return new KafkaPartitionOffset(range.topic(), range.partition(), next);
  }

  @Override
  public void close() {
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

  /**
   * The task's counts so far ({@link TaskMetrics}). Spark asks as rows are read and once more when
   * {@link #next} returns {@code false}, before {@link #close}: the tuples dead-lettered are
   * counted as they are refused, though they are sent when the reader closes (a send that fails
   * fails the task, and Spark keeps no metric of a failed task).
   */
  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return new CustomTaskMetric[] {
      TaskMetrics.value(TaskMetrics.ROWS_READ, rowsRead),
      TaskMetrics.value(TaskMetrics.DEAD_LETTERED, deadLettered),
      TaskMetrics.value(TaskMetrics.SWEPT_READ, swept.count()),
      TaskMetrics.value(TaskMetrics.OFFSET_OUT_OF_RANGE, lost.offsetOutOfRange()),
      TaskMetrics.value(TaskMetrics.DATA_LOSS, lost.dataLoss())
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
    stall.reset();
    if (range.endAtLatest()) {
      range = range.withEnd(lost.latestEnd(range, tp, consumer.endOffsets(List.of(tp)).get(tp)));
    }
    long start = range.start();
    if (!options.failOnDataLoss) {
      start = lost.pastLost(range, tp, consumer.beginningOffsets(List.of(tp)).get(tp));
    }
    nextOffset = start;
    fetched = java.util.Collections.emptyIterator();
    if (options.sweepCatalog != null) {
      start = unsweep(tp, start, consumer.beginningOffsets(List.of(tp)).get(tp));
    }
    consumer.seek(tp, start);
    rangeDone = start >= range.end() && !fetched.hasNext();
  }

  private void finishRange() {
    swept.end();
    if (consumer != null && range != null) {
      consumers.release(new TopicPartition(range.topic(), range.partition()), consumer);
      consumer = null;
    }
  }

  private void poll() {
    TopicPartition tp = new TopicPartition(range.topic(), range.partition());
    if (swept.reading() && consumer.position(tp) >= range.end()) {
      rangeDone = true; // the rest of the range came from BLOBs
      return;
    }
    long deadline = System.currentTimeMillis() + StallWatch.READ_STALL_TIMEOUT_MS;
    while (true) {
      long started = System.currentTimeMillis();
      if (started >= deadlineMs) {
        deadlineReached = true; // a real-time batch's end: where it stands is position()
        return;
      }
      long before = consumer.position(tp);
      ConsumerRecords<byte[], byte[]> records;
      try {
        records = consumer.poll(Duration.ofMillis(pollMs(started)));
      } catch (OffsetOutOfRangeException e) {
        long from = e.offsetOutOfRangePartitions().getOrDefault(tp, before);
        long low = consumer.beginningOffsets(List.of(tp)).get(tp);
        if (options.sweepCatalog != null && from < low) {
          // Swept while this range was reading: BLOBs hold the rest up to the log start.
          consumer.seek(tp, unsweep(tp, from, low));
          return;
        }
        long next =
            lost.skipLost(range, tp, from, low, consumer.endOffsets(List.of(tp)).get(tp), e);
        if (next >= range.end()) {
          rangeDone = true;
          return;
        }
        if (next != from) { // progress; else the broker holds it again: the deadline stands
          deadline = System.currentTimeMillis() + StallWatch.READ_STALL_TIMEOUT_MS;
        }
        consumer.seek(tp, next);
        continue;
      }
      List<ConsumerRecord<byte[], byte[]>> got = records.records(tp);
      if (!got.isEmpty()) {
        stall.reset();
        fetched = got.iterator();
        return;
      }
      // Transaction markers and aborted records take offsets but yield no record.
      long position = consumer.position(tp);
      if (position >= range.end()) {
        rangeDone = true;
        return;
      }
      long now = System.currentTimeMillis();
      if (stall.askBroker(before, position, now)) {
        long low = consumer.beginningOffsets(List.of(tp)).get(tp);
        long high = consumer.endOffsets(List.of(tp)).get(tp);
        // A range's end lies past the log's end: the offsets it needs are gone. A real-time
        // range has no end, and a position at the log's end is where it waits for more.
        boolean pastEnd = deadlineMs == Long.MAX_VALUE ? position >= high : position > high;
        if (position < low || pastEnd) {
          long next = lost.skipLost(range, tp, position, low, high, null);
          if (next >= range.end()) {
            rangeDone = true;
            return;
          }
          consumer.seek(tp, next);
          stall.reset();
          deadline = now + StallWatch.READ_STALL_TIMEOUT_MS;
          continue;
        }
      }
      if (now > deadline && deadlineMs == Long.MAX_VALUE) {
        throw StallWatch.stalled(tp, range, position);
      }
    }
  }

  /**
   * How long the next poll may wait, in ms: {@link #POLL_MS} in a micro-batch, {@link
   * #REAL_TIME_POLL_MS} or the time left until the real-time batch's deadline, whichever is less.
   */
  private long pollMs(long now) {
    if (deadlineMs == Long.MAX_VALUE) {
      return POLL_MS;
    }
    return Math.max(1, Math.min(REAL_TIME_POLL_MS, deadlineMs - now));
  }

  /**
   * With a sweep catalog, the records of {@code [from, min(range end, low))} come from the BLOB
   * chain ({@link SweptReads}): {@link #fetched} is set to them.
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
    SweptRecords records = swept.read(tp, from, range.end(), low);
    fetched = records;
    return records.brokerFrom();
  }

  /** Keep {@code record} for the dead-letter topic, counted in {@code deadLettered}. */
  private void deadLetter(ConsumerRecord<byte[], byte[]> record, TupleRejected why) {
    dead.add(record, why);
    deadLettered++;
  }
}
