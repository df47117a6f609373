package io.floodgate.spark.read;

import java.io.Serializable;

/**
 * One Kafka partition's share of a micro-batch: offsets {@code [start, end)}.
 *
 * @param topic the topic
 * @param partition the Kafka partition
 * @param start first offset read
 * @param end first offset not read
 * @param watermarkMs the micro-batch's watermark for late tuples (epoch ms; {@code null}: no
 *     lateness check)
 * @param batchId the micro-batch's id ({@code null}: unknown)
 */
public record KafkaRange(
    String topic, int partition, long start, long end, Long watermarkMs, Long batchId)
    implements Serializable {
  /** Offsets spanned (an upper bound of the tuples: transaction markers take offsets too). */
  public long size() {
    return end - start;
  }
}
