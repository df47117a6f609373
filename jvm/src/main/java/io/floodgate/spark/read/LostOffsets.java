package io.floodgate.spark.read;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.swept.DataLossException;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a task does where its range meets offsets the broker no longer holds, as Spark's {@code
 * KafkaDataConsumer} does: with {@code failOnDataLoss} (the default) it fails with a {@link
 * DataLossException} naming the partition, the offsets lost and those the broker holds; without, it
 * skips them with a {@code FG-SOURCE-004} warning and counts them ({@link #offsetOutOfRange}:
 * offsets, {@link #dataLoss}: times) for the task's metrics ({@link TaskMetrics}).
 *
 * <p>Three places: below the log start when a range starts ({@link #pastLost}), a range to {@code
 * latest} whose partition went back since it was planned ({@link #latestEnd}), and a gap or an
 * out-of-range answer in the middle of a range ({@link #skipLost}). The broker is asked by the
 * reader; this class only decides.
 */
final class LostOffsets {
  /** The reader's logger: these warnings are the task's. */
  private static final Logger LOG = LoggerFactory.getLogger(RangeReader.class);

  /**
   * What a data-loss failure tells the user, as Spark's {@code INSTRUCTION_FOR_FAIL_ON_DATA_LOSS}.
   */
  static final String FAIL_HINT =
      "Some data may have been lost. Set failOnDataLoss = false to skip such offsets and go on, as"
          + " Spark's Kafka source allows";

  private final SourceOptions options;

  /** Offsets skipped as lost ({@code failOnDataLoss = false}). */
  private long offsetOutOfRange;

  /** Times offsets were found lost and skipped. */
  private long dataLoss;

  LostOffsets(SourceOptions options) {
    this.options = options;
  }

  /** Offsets skipped as lost so far. */
  long offsetOutOfRange() {
    return offsetOutOfRange;
  }

  /** Times offsets were found lost and skipped so far. */
  long dataLoss() {
    return dataLoss;
  }

  /**
   * Where a range planned to {@code latest} ends now: the partition's last stable offset when the
   * task runs. Below the range's start (the topic deleted and created again, or truncated, since
   * the planning), that is data loss, as in {@link #skipLost}: the range is then empty.
   *
   * @param latest the partition's last stable offset now
   * @return the range's end
   * @throws DataLossException the offsets went back, with {@code failOnDataLoss}
   */
  long latestEnd(KafkaRange range, TopicPartition tp, long latest) {
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

  /**
   * {@code range.start}, or the low watermark past it (failOnDataLoss = false).
   *
   * @param low the partition's log start offset now
   */
  long pastLost(KafkaRange range, TopicPartition tp, long low) {
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
  long skipLost(
      KafkaRange range, TopicPartition tp, long from, long low, long high, Exception cause) {
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
}
