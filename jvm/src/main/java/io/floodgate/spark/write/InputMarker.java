package io.floodgate.spark.write;

import io.floodgate.spark.kafka.CommitMetadata;
import io.floodgate.spark.kafka.Names;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * How a real-time write task with exactly-once delivery recognises the rows it committed before a
 * crash: the input position its transaction commits with its records.
 *
 * <p>A micro-batch's {@link BatchMarker} names a batch, and a replayed micro-batch reads the same
 * offsets again. A real-time batch has no end offset until its tasks have committed: Spark logs its
 * end (where the readers stood at the deadline) after the sink's commit, and a batch cut short by a
 * crash is run again from its start to a new deadline, past or short of where the first run ended.
 * So a real-time task commits what Kafka's read-process-write pattern commits: the next input
 * offset its output covers. Its transaction sends ({@code sendOffsetsToTransaction}) an offset
 * commit to consumer group {@code <transactionalIdPrefix>.input}: on the input topic-partition the
 * task read, the offset its reader would read next, with metadata {@code {"query_id", "batch",
 * "tuples"}}. Before it writes, a task reads that commit (stable, as {@link BatchMarker} does); a
 * row from an input offset below it was committed before and is skipped, whichever batch it falls
 * in now.
 *
 * <p>The group is no reader: it holds where the query's output stands, not a consumer's position,
 * and is not the query's consumer group, which the driver commits for lag.
 */
public final class InputMarker {
  private final String queryId;
  private final String group;

  /**
   * @param queryId Spark's id of the query (kept in its checkpoint: a new checkpoint starts afresh)
   * @param transactionalIdPrefix the sink's {@code transactionalIdPrefix}
   */
  public InputMarker(String queryId, String transactionalIdPrefix) {
    this.queryId = queryId;
    this.group = Names.inputMarkerGroupId(transactionalIdPrefix);
  }

  /** The group's metadata, as {@code sendOffsetsToTransaction} takes it. */
  public ConsumerGroupMetadata groupMetadata() {
    return new ConsumerGroupMetadata(group);
  }

  /**
   * The offset commit of a task that read {@code input} up to {@code next} (exclusive) in batch
   * {@code batch} and wrote {@code tuples}.
   */
  public Map<TopicPartition, OffsetAndMetadata> of(
      TopicPartition input, long next, long batch, long tuples) {
    return Map.of(input, new OffsetAndMetadata(next, CommitMetadata.of(queryId, batch, tuples)));
  }

  /**
   * The input offset below which this query's output from {@code input} is committed, -1 for none
   * (no marker, or another query's).
   *
   * @throws IllegalStateException the broker did not answer within {@link
   *     BatchMarker#READ_TIMEOUT_MS}
   */
  public long writtenTo(Admin admin, TopicPartition input) {
    return writtenTo(queryId, BatchMarker.committed(admin, group, input));
  }

  /** The input offset a commit marks for query {@code queryId}, -1 when it is not the query's. */
  static long writtenTo(String queryId, OffsetAndMetadata committed) {
    return CommitMetadata.ofQuery(queryId, committed) == null ? -1 : committed.offset();
  }
}
