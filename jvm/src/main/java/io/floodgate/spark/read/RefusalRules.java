package io.floodgate.spark.read;

import io.floodgate.spark.options.EventTimeWindow;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.TupleRejected;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.Locale;

/**
 * The tuples the source refuses although they decode, each dead-lettered with its reason
 * (docs/reference/codes.md, "Dead letters"):
 *
 * <ul>
 *   <li>{@code null-key}: the stream is keyed ({@code keyRequired}) and the record has no key;
 *   <li>{@code future-event-time}: the event time ({@code timestampMode = data_source}) is more
 *       than {@code maxEventTimeAheadMs} after the record's Kafka timestamp, which would move the
 *       watermark past every other tuple;
 *   <li>{@code late}: the query aggregates the stream over an event-time window and the tuple's
 *       latest window ended at or before the micro-batch's watermark, so Spark would drop it
 *       without a trace ({@code numRowsDroppedByWatermark}).
 * </ul>
 */
public final class RefusalRules {
  private final boolean keyRequired;
  private final Long aheadMs;
  private final EventTimeWindow window;

  public RefusalRules(SourceOptions options) {
    this.keyRequired = options.keyRequired;
    this.aheadMs = options.timestampMode.equals("data_source") ? options.maxEventTimeAheadMs : null;
    this.window = options.lateWindow;
  }

  /** Whether no rule can refuse a tuple of a micro-batch with this watermark. */
  public boolean none(Long watermarkMs) {
    return !keyRequired && aheadMs == null && (window == null || watermarkMs == null);
  }

  /**
   * Why the source refuses a decoded tuple, or {@code null} to keep it.
   *
   * @param hasKey whether the record has a key
   * @param timestampMs its Kafka timestamp (epoch ms), {@code null} when it has none
   * @param eventTimeMs its event time (epoch ms), {@code null} when it has none
   * @param watermarkMs the micro-batch's watermark, {@code null} before the first
   * @param batchId the micro-batch's id, for the message
   */
  public TupleRejected refusal(
      boolean hasKey, Long timestampMs, Long eventTimeMs, Long watermarkMs, Long batchId) {
    if (!hasKey && keyRequired) {
      return new TupleRejected("null-key", "the record has no key; the stream is keyed");
    }
    if (eventTimeMs == null) {
      return null;
    }
    if (aheadMs != null && timestampMs != null && eventTimeMs > timestampMs + aheadMs) {
      return new TupleRejected(
          "future-event-time",
          "event time "
              + iso(eventTimeMs)
              + " is "
              + String.format(Locale.ROOT, "%,.0f", (eventTimeMs - timestampMs) / 1000.0)
              + " s after the record's timestamp "
              + iso(timestampMs)
              + "; at most "
              + String.format(Locale.ROOT, "%,.0f", aheadMs / 1000.0)
              + " s is accepted (max_event_time_ahead_ms)");
    }
    if (window != null && watermarkMs != null && window.isLate(eventTimeMs, watermarkMs)) {
      return new TupleRejected(
          "late",
          "event time "
              + iso(eventTimeMs)
              + ": its latest window ended "
              + iso(window.lastEnd(eventTimeMs))
              + ", at or before the watermark "
              + iso(watermarkMs)
              + " for micro-batch "
              + batchId
              + "; Spark would drop it from the aggregation");
    }
    return null;
  }

  /**
   * Epoch ms as ISO 8601 with milliseconds and the offset {@code +00:00}, as refusals' messages
   * write times: {@code 2024-01-01T00:00:00.000+00:00}.
   */
  static String iso(long epochMs) {
    String text = Instant.ofEpochMilli(epochMs).truncatedTo(ChronoUnit.MILLIS).toString();
    // Instant prints 2024-01-01T00:00:00Z: no millisecond digits when they are 0, and a Z.
    String bare = text.substring(0, text.length() - 1);
    if (bare.length() == 19) {
      bare += ".000";
    }
    return bare + "+00:00";
  }
}
