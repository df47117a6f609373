package io.floodgate.spark.write;

import io.floodgate.spark.RealTimeReads;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;

/**
 * What a write task asks of Kafka beside its producer's own calls: its partition's producer, its
 * batch marker (a real-time task's: its input marker and its reader's position), and the output
 * stream queue's length. {@link #pooled} is the sink's (producers kept per executor, one admin
 * client per executor); a test gives Kafka's {@code MockProducer} and answers of its own.
 */
interface TaskClients {
  /** The producer of {@code transactionalId}, ready for a transaction. */
  Producer<byte[], byte[]> take(String transactionalId);

  /** Keep {@code producer}, its transaction ended, for the next task of its partition. */
  void give(String transactionalId, Producer<byte[], byte[]> producer);

  /** The last batch {@code marker} says was committed, -1 for none. */
  long lastCommitted(BatchMarker marker);

  /** The input offset below which {@code marker} says {@code input}'s output is committed. */
  long writtenTo(InputMarker marker, TopicPartition input);

  /** Where the running real-time task's reader stands; {@code null}: no reader in the task. */
  default RealTimeReads.Position sourcePosition() {
    return RealTimeReads.current();
  }

  /** The output stream queue now: its length (every record in the log) and readers' positions. */
  OutputQueue.Reading queueReading();

  /** The sink's clients for {@code options}. */
  static TaskClients pooled(SinkOptions options) {
    return new TaskClients() {
      private OutputQueue queue;

      @Override
      public Producer<byte[], byte[]> take(String transactionalId) {
        return TransactionalProducers.take(options, transactionalId);
      }

      @Override
      public void give(String transactionalId, Producer<byte[], byte[]> producer) {
        TransactionalProducers.give(options, transactionalId, producer);
      }

      @Override
      public long lastCommitted(BatchMarker marker) {
        return marker.lastCommitted(TransactionalProducers.admin(options));
      }

      @Override
      public long writtenTo(InputMarker marker, TopicPartition input) {
        return marker.writtenTo(TransactionalProducers.admin(options), input);
      }

      @Override
      public OutputQueue.Reading queueReading() {
        if (queue == null) {
          queue = OutputQueue.of(options);
        }
        return queue.reading();
      }
    };
  }
}
