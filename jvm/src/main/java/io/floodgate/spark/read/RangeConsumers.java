package io.floodgate.spark.read;

import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * Where a {@link RangeReader} gets the consumer of each range and where it leaves it: {@link
 * #pooled} in Spark's tasks ({@link ConsumerPool}); tests give Kafka's {@code MockConsumer}.
 */
interface RangeConsumers {
  /** A consumer for {@code tp}'s range, not yet assigned. */
  Consumer<byte[], byte[]> acquire(TopicPartition tp);

  /** {@code consumer} read its range to the end: it may serve the next one of {@code tp}. */
  void release(TopicPartition tp, Consumer<byte[], byte[]> consumer);

  /**
   * {@code consumer} stopped inside a range (an error, a killed task): closed, never pooled, as
   * Spark's {@code KafkaDataConsumer} drops the consumer of a failed task.
   */
  default void discard(Consumer<byte[], byte[]> consumer) {
    consumer.close(Duration.ZERO);
  }

  /** The executor's pool, keyed by {@code properties} and the partition. */
  static RangeConsumers pooled(Properties properties) {
    return new RangeConsumers() {
      @Override
      public Consumer<byte[], byte[]> acquire(TopicPartition tp) {
        return ConsumerPool.acquire(properties, tp.topic(), tp.partition());
      }

      @Override
      public void release(TopicPartition tp, Consumer<byte[], byte[]> consumer) {
        // Only ever given back what acquire made: the pool's KafkaConsumers.
        ConsumerPool.release(
            properties, tp.topic(), tp.partition(), (KafkaConsumer<byte[], byte[]>) consumer);
      }
    };
  }
}
