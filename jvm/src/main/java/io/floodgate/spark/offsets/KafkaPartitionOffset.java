package io.floodgate.spark.offsets;

import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/**
 * Where a real-time task of one topic-partition stopped: the next offset to read, as Spark's {@code
 * KafkaSourcePartitionOffset}. Spark takes it from the task's reader at the end of a real-time
 * batch ({@code SupportsRealTimeRead.getOffset}) and hands every task's to the stream's {@code
 * mergeOffsets}, which makes the batch's end offset.
 *
 * @param topic the topic
 * @param partition the Kafka partition
 * @param offset the next offset to read: the last record read plus one, or where the task started
 */
public record KafkaPartitionOffset(String topic, int partition, long offset)
    implements PartitionOffset {

  /** The topic-partition. */
  public TopicPartition topicPartition() {
    return new TopicPartition(topic, partition);
  }
}
