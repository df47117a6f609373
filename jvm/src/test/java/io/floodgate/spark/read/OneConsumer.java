package io.floodgate.spark.read;

import java.util.Map;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;

/** The consumers a reader took back and closed: a pool of one mock. */
final class OneConsumer implements RangeConsumers {
  static final TopicPartition TP = new TopicPartition("t", 0);

  final MockConsumer<byte[], byte[]> mock = new MockConsumer<>(OffsetResetStrategy.NONE);
  int released;
  int discarded;

  @Override
  public Consumer<byte[], byte[]> acquire(TopicPartition tp) {
    return mock;
  }

  @Override
  public void release(TopicPartition tp, Consumer<byte[], byte[]> consumer) {
    released++;
  }

  @Override
  public void discard(Consumer<byte[], byte[]> consumer) {
    discarded++;
    consumer.close();
  }

  /** Records {@code [from, to)} of {@link #TP}, given at the next poll. */
  void recordsAtNextPoll(long from, long to) {
    mock.schedulePollTask(
        () -> {
          for (long o = from; o < to; o++) {
            mock.addRecord(
                new ConsumerRecord<>(TP.topic(), TP.partition(), o, null, ("v" + o).getBytes()));
          }
        });
  }

  /** The broker holds {@code [low, high)}. */
  void holds(long low, long high) {
    mock.updateBeginningOffsets(Map.of(TP, low));
    mock.updateEndOffsets(Map.of(TP, high));
  }
}
