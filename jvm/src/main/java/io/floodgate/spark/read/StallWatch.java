package io.floodgate.spark.read;

import org.apache.kafka.common.TopicPartition;

/**
 * How a range's reader tells a range that makes no progress: polls in a row that return nothing at
 * the same position. After two, it may ask the broker which offsets it holds ({@link #askBroker}),
 * at most once every {@link #AVAILABLE_CHECK_MS}, to tell a gap (the range's offsets gone: data
 * loss, {@link LostOffsets}) from a broker slow to answer; after {@link #READ_STALL_TIMEOUT_MS}
 * without progress a micro-batch's range fails the task ({@link #stalled}). A real-time range never
 * fails so: an idle partition is no stall there.
 */
final class StallWatch {
  /** A range that makes no progress for this long fails the task. */
  static final long READ_STALL_TIMEOUT_MS = 60_000;

  /**
   * While a range makes no progress, how often the reader asks the broker which offsets it holds
   * (two requests), to tell a gap (the range's offsets gone: data loss) from a broker that is slow
   * to answer. Asked after two polls in a row return nothing at the same position: the first poll
   * after a seek may return before its fetch does.
   */
  static final long AVAILABLE_CHECK_MS = 1_000;

  /** Polls in a row that returned nothing at the same position. */
  private int stalledPolls;

  /** When the reader last asked the broker which offsets it holds (ms since the epoch). */
  private long availableCheckedMs;

  /** The range moved on (records came, or the reader sought elsewhere). */
  void reset() {
    stalledPolls = 0;
  }

  /**
   * After a poll that returned no record: whether to ask the broker which offsets it holds now.
   *
   * @param before the consumer's position before the poll
   * @param position its position after
   * @param now the time (ms since the epoch)
   */
  boolean askBroker(long before, long position, long now) {
    stalledPolls = position == before ? stalledPolls + 1 : 0;
    if (stalledPolls >= 2 && now - availableCheckedMs >= AVAILABLE_CHECK_MS) {
      availableCheckedMs = now;
      return true;
    }
    return false;
  }

  /** The failure of a range that made no progress for {@link #READ_STALL_TIMEOUT_MS}. */
  static IllegalStateException stalled(TopicPartition tp, KafkaRange range, long position) {
    return new IllegalStateException(
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
