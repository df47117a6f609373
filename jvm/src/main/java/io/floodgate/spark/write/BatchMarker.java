package io.floodgate.spark.write;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.kafka.CommitMetadata;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * How a write task recognises that its partition of a micro-batch was already committed: the batch
 * marker its transaction commits with its records.
 *
 * <p>Task {@code p}'s transaction sends, as Kafka's read-process-write pattern sends input offsets
 * ({@code sendOffsetsToTransaction}), an offset commit to its own consumer group {@code
 * <transactionalIdPrefix>.<p>}: offset {@code <batch>} on the output topic's partition 0, with
 * metadata {@code {"query_id": <Spark's query id>, "batch": <batch>, "tuples": <n>}}. So the marker
 * is committed exactly when the records are. Before it writes anything, a task reads that group's
 * commit with {@code requireStable} (KIP-447: the broker answers once no transaction of the group
 * is pending); if it names this query (the checkpoint's id, so a new checkpoint starts afresh) and
 * a batch at or after this one, the partition was committed before a crash, and the task skips its
 * rows.
 *
 * <p>The group is no reader: its offset is a batch id, not a position, and its "lag" on the output
 * topic means nothing.
 */
public final class BatchMarker {
  /** How long the marker's read may take, ms. */
  public static final long READ_TIMEOUT_MS = 60_000;

  private final String queryId;
  private final String group;
  private final TopicPartition partition;

  /**
   * @param queryId Spark's id of the query (kept in its checkpoint)
   * @param group the task's consumer group
   * @param topic the output topic
   */
  public BatchMarker(String queryId, String group, String topic) {
    this.queryId = queryId;
    this.group = group;
    this.partition = new TopicPartition(topic, 0);
  }

  /** The group's metadata, as {@code sendOffsetsToTransaction} takes it. */
  public ConsumerGroupMetadata groupMetadata() {
    return new ConsumerGroupMetadata(group);
  }

  /** The offset commit of batch {@code batch} with {@code tuples} written. */
  public Map<TopicPartition, OffsetAndMetadata> of(long batch, long tuples) {
    return Map.of(
        partition, new OffsetAndMetadata(batch, CommitMetadata.of(queryId, batch, tuples)));
  }

  /**
   * The last batch of this query committed by the task's partition, -1 for none (no marker, or
   * another query's).
   *
   * @throws IllegalStateException the broker did not answer within {@link #READ_TIMEOUT_MS}
   */
  public long lastCommitted(Admin admin) {
    return lastCommitted(queryId, committed(admin, group, partition));
  }

  /**
   * The stable commit of consumer group {@code group} on {@code partition} ({@code requireStable},
   * KIP-447: the broker answers once no transaction of the group on it is pending), {@code null}
   * for none.
   *
   * @throws IllegalStateException the broker did not answer within {@link #READ_TIMEOUT_MS}
   */
  static OffsetAndMetadata committed(Admin admin, String group, TopicPartition partition) {
    try {
      return admin
          .listConsumerGroupOffsets(
              Map.of(group, new ListConsumerGroupOffsetsSpec().topicPartitions(List.of(partition))),
              new ListConsumerGroupOffsetsOptions().requireStable(true))
          .partitionsToOffsetAndMetadata(group)
          .get(READ_TIMEOUT_MS, TimeUnit.MILLISECONDS)
          .get(partition);
    } catch (ExecutionException | TimeoutException e) {
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      throw new IllegalStateException(
          "cannot read the batch marker of consumer group '" + group + "': " + cause, cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted reading consumer group '" + group + "'", e);
    }
  }

  /** The batch a commit marks for query {@code queryId}, -1 when it marks none of its batches. */
  static long lastCommitted(String queryId, OffsetAndMetadata committed) {
    JsonNode marker = CommitMetadata.ofQuery(queryId, committed);
    return marker == null ? -1 : marker.path("batch").asLong(-1);
  }
}
