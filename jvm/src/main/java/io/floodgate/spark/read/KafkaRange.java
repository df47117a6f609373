package io.floodgate.spark.read;

import java.io.Serializable;

/**
 * One Kafka partition's share of a micro-batch or of a batch query: offsets {@code [start, end)}.
 *
 * @param topic the topic
 * @param partition the Kafka partition
 * @param start first offset read
 * @param end first offset not read
 * @param watermarkMs the micro-batch's watermark for late tuples (epoch ms; {@code null}: no
 *     lateness check)
 * @param batchId the micro-batch's id ({@code null}: unknown)
 * @param endAtLatest {@code end} is the planning's reading of {@code latest} (a batch query's
 *     {@code endingOffsets}) and the task reads to the partition's last stable offset when it runs
 *     instead, as Spark's Kafka source resolves {@code latest} each time a batch query is executed
 */
public record KafkaRange(
    String topic,
    int partition,
    long start,
    long end,
    Long watermarkMs,
    Long batchId,
    boolean endAtLatest)
    implements Serializable {
  /** A range with a fixed end (a micro-batch's, or a batch query's given end). */
  public KafkaRange(
      String topic, int partition, long start, long end, Long watermarkMs, Long batchId) {
    this(topic, partition, start, end, watermarkMs, batchId, false);
  }

  /** This range ending at {@code newEnd}, fixed. */
  public KafkaRange withEnd(long newEnd) {
    return new KafkaRange(topic, partition, start, newEnd, watermarkMs, batchId, false);
  }

  /** Offsets spanned (an upper bound of the tuples: transaction markers take offsets too). */
  public long size() {
    return end - start;
  }
}
