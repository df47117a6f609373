package io.floodgate.spark.swept;

/**
 * Offsets a micro-batch must read are held neither by the broker nor by a BLOB: lost data, never
 * skipped silently (the sweeper truncates the broker only behind a registered BLOB, so a gap is a
 * loss). Its message is worded as that of {@code pipeline.errors.DataLossError}, which the Python
 * reader of swept BLOBs ({@code pipeline.swept.reading}) raises for the same gap: {@code data loss
 * on topic 'T' partition P, offsets [start, end): ...}.
 */
public class DataLossException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String topic;
  private final int partition;
  private final long start;
  private final long end;
  private final Long availableFrom;

  /**
   * @param message what is lost and why
   * @param topic the topic
   * @param partition the partition
   * @param start first offset of the range asked for
   * @param end offset after the range asked for
   * @param availableFrom the broker's log start offset at the time, or {@code null} when unknown
   */
  public DataLossException(
      String message, String topic, int partition, long start, long end, Long availableFrom) {
    super(
        "data loss on topic '"
            + topic
            + "' partition "
            + partition
            + ", offsets ["
            + start
            + ", "
            + end
            + "): "
            + message);
    this.topic = topic;
    this.partition = partition;
    this.start = start;
    this.end = end;
    this.availableFrom = availableFrom;
  }

  /** The topic. */
  public String topic() {
    return topic;
  }

  /** The partition. */
  public int partition() {
    return partition;
  }

  /** First offset of the range asked for. */
  public long start() {
    return start;
  }

  /** Offset after the range asked for. */
  public long end() {
    return end;
  }

  /** The broker's log start offset at the time, or {@code null} when unknown. */
  public Long availableFrom() {
    return availableFrom;
  }
}
