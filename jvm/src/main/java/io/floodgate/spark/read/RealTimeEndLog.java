package io.floodgate.spark.read;

import io.floodgate.spark.kafka.Admins;
import io.floodgate.spark.kafka.CommitMetadata;
import io.floodgate.spark.options.SourceOptions;
import java.util.Comparator;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.TaskContext;

/**
 * Where each task of a real-time batch stopped reading, kept in Kafka before the batch's output can
 * commit (option {@code realTimeEndsGroup}), so that a batch run again after a crash reads exactly
 * the input its first run read.
 *
 * <p>Spark's Real-Time Mode logs a batch's end offsets only after the sink committed, and runs a
 * batch cut short by a crash again from its start to a new deadline. A query whose write tasks read
 * their own input commits its input position with its output (the sink's {@code InputMarker});
 * after a shuffle (an aggregation) the write tasks cannot know it, and a replay that read to
 * another end would compute other output than what a write task committed in the first run. So each
 * read task, at its end and before it tells the shuffle it is done (a write task after a shuffle
 * commits only once every read task ended), commits its next offset to consumer group {@code
 * realTimeEndsGroup} on its topic-partition, with metadata {@code {"query_id", "batch"}}. When the
 * source plans a batch that the log names for its query ({@link #logged}), each task reads to the
 * logged end and stops there. The replay reads the same records, its state ends as the first run's
 * did, and the write tasks that committed skip it by their batch markers, as in a micro-batch.
 *
 * <p>The group is no reader: it holds where the query's real-time tasks stopped.
 */
public final class RealTimeEndLog {
  /** How long a read or a write of the log may take, ms. */
  static final long TIMEOUT_MS = 30_000;

  /** Spark's local property of the running query's id ({@code StreamExecution.QUERY_ID_KEY}). */
  public static final String QUERY_ID = "sql.streaming.queryId";

  /** Spark's local property of the running batch ({@code MicroBatchExecution.BATCH_ID_KEY}). */
  public static final String BATCH_ID = "streaming.sql.batchId";

  /** How an end reaches the group: an offset commit. */
  interface Committer {
    void commit(String group, Map<TopicPartition, OffsetAndMetadata> offsets);
  }

  private final String group;
  private final String metadata;
  private final Committer committer;

  RealTimeEndLog(String group, String queryId, long batch, Committer committer) {
    this.group = group;
    this.metadata = CommitMetadata.of(queryId, batch);
    this.committer = committer;
  }

  /**
   * The running task's log, its query and batch taken from the task's local properties (Spark sets
   * them on the query's thread, and a task inherits them); {@code null} without {@code
   * realTimeEndsGroup}.
   *
   * @throws IllegalStateException the task names no streaming query or batch
   */
  public static RealTimeEndLog forTask(SourceOptions options) {
    if (options.realTimeEndsGroup == null) {
      return null;
    }
    TaskContext task = TaskContext.get();
    String queryId = task == null ? null : task.getLocalProperty(QUERY_ID);
    String batch = task == null ? null : task.getLocalProperty(BATCH_ID);
    if (queryId == null || batch == null) {
      throw new IllegalStateException(
          "source "
              + options.stream
              + ": realTimeEndsGroup is set, and this task runs in no streaming query's batch");
    }
    Admin admin = admin(options);
    return new RealTimeEndLog(
        options.realTimeEndsGroup,
        queryId,
        Long.parseLong(batch),
        (group, offsets) ->
            await(admin.alterConsumerGroupOffsets(group, offsets).all(), "commit to", group));
  }

  /**
   * Log that this task stopped reading {@code input} at {@code end}, the next offset it would read.
   *
   * @throws IllegalStateException the broker did not take the commit within {@link #TIMEOUT_MS}
   */
  public void record(TopicPartition input, long end) {
    committer.commit(group, Map.of(input, new OffsetAndMetadata(end, metadata)));
  }

  /**
   * On the driver: where the tasks of batch {@code batch} of query {@code queryId} stopped, per
   * topic-partition, as they logged it; empty when none did (the batch did not run before).
   *
   * @throws IllegalStateException the broker did not answer within {@link #TIMEOUT_MS}
   */
  public static SortedMap<TopicPartition, Long> logged(
      SourceOptions options, String queryId, long batch) {
    String group = options.realTimeEndsGroup;
    Map<TopicPartition, OffsetAndMetadata> committed =
        await(
            admin(options).listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata(),
            "read",
            group);
    return ends(committed, queryId, batch);
  }

  /** Of a group's commits, the ends of batch {@code batch} of query {@code queryId}. */
  static SortedMap<TopicPartition, Long> ends(
      Map<TopicPartition, OffsetAndMetadata> committed, String queryId, long batch) {
    SortedMap<TopicPartition, Long> ends =
        new TreeMap<>(
            Comparator.comparing(TopicPartition::topic)
                .thenComparingInt(TopicPartition::partition));
    committed.forEach(
        (tp, commit) -> {
          if (CommitMetadata.names(commit, queryId, batch)) {
            ends.put(tp, commit.offset());
          }
        });
    return ends;
  }

  /** This JVM's admin client of the source's cluster ({@link Admins}). */
  private static Admin admin(SourceOptions options) {
    return Admins.of(options.bootstrapServers, options.client);
  }

  private static <T> T await(Future<T> answer, String what, String group) {
    try {
      return answer.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
    } catch (ExecutionException | TimeoutException e) {
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      throw new IllegalStateException(
          "cannot " + what + " consumer group '" + group + "' (realTimeEndsGroup): " + cause,
          cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted: consumer group '" + group + "'", e);
    }
  }
}
