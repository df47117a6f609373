package io.floodgate.spark.write;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.AlterConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A streaming query's output, on the driver: once per micro-batch it reads the output stream
 * queue's free space and ships the writer factory with it; once the batch's tasks all committed it
 * commits the batch's input offsets to the query's consumer group ({@link InputOffsets}) and counts
 * what was written ({@link SinkMetrics}; with at-least-once delivery, in the checkpoint too: {@link
 * OutputLog}).
 *
 * <p>Exactly once without a transaction that spans tasks: each task commits its own transaction
 * with a batch marker ({@link BatchMarker}), so a batch replayed after a failure anywhere
 * (mid-task, after some tasks committed, after all did but before Spark's commit log, in a retried
 * or speculative attempt) writes only the partitions not yet committed.
 */
final class KafkaStreamingWrite implements StreamingWrite {
  private static final Logger LOG = LoggerFactory.getLogger(KafkaStreamingWrite.class);

  /** How long the driver waits for a micro-batch's input offsets to be committed, ms. */
  static final long OFFSET_COMMIT_TIMEOUT_MS = 15_000;

  /** How long the input offsets' commits may go on failing before the query fails, ms. */
  static final long OFFSETS_BEHIND_LIMIT_MS = 120_000;

  private final SinkOptions options;
  private final StructType rowSchema;
  private final String queryId;
  private final SinkMetrics metrics;

  /**
   * Where real-time batches commit their input offsets and read the queue ahead (daemon threads,
   * idle ones end).
   */
  private static final ExecutorService OFFSET_COMMITS =
      Executors.newCachedThreadPool(
          task -> {
            Thread thread = new Thread(task, "floodgate-sink-offset-commit");
            thread.setDaemon(true);
            return thread;
          });

  private OutputQueue queue;

  /** The queue read for the next real-time batch, once this one's tasks committed. */
  private Future<OutputQueue.Reading> nextReading;

  private OutputLog outputLog;
  private volatile long offsetsFailingSince = -1;
  private Future<?> pendingCommit;

  KafkaStreamingWrite(
      SinkOptions options, StructType rowSchema, String queryId, SinkMetrics metrics) {
    this.options = options;
    this.rowSchema = rowSchema;
    this.queryId = queryId;
    this.metrics = metrics;
    // Fail at start, on the driver, for a schema the output stream cannot take.
    SinkSchemas.encoder(options, rowSchema, SinkSchemas.avro(options));
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    long free = Long.MAX_VALUE;
    long consumed = 0;
    if (options.bounded()) {
      long started = System.nanoTime();
      OutputQueue.Reading reading = queueReading();
      free = Math.max(0, options.maxQueueSize - reading.length());
      consumed = reading.consumed();
      metrics.queueChecked(free, (System.nanoTime() - started) / 1e6);
    }
    return new KafkaWriterFactory(
        options, rowSchema, queryId, info.numPartitions(), free, consumed);
  }

  /**
   * The output stream queue now, for the batch that starts: read when the previous real-time batch
   * committed, if it was ({@link #readAhead}), else now.
   */
  private OutputQueue.Reading queueReading() {
    Future<OutputQueue.Reading> ahead = nextReading;
    nextReading = null;
    if (ahead != null) {
      try {
        return ahead.get();
      } catch (ExecutionException e) {
        LOG.warn("{}: reading the output stream queue ahead failed; read again", options.where());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted reading the output stream queue", e);
      }
    }
    if (queue == null) {
      queue = OutputQueue.of(options);
    }
    return queue.reading();
  }

  /**
   * Read the queue for the next real-time batch in the background, now that this one's tasks
   * committed: the broker's answer then comes while the driver logs this batch and plans the next,
   * not in the gap between their tasks, where no tuple is read. The query is the queue's sole
   * writer, so nothing is written to it before the next batch's tasks start; its readers only
   * consume, so a reading made earlier counts no more tuples in the queue than one made at the
   * start. With other writers, the queue is read when the batch starts.
   */
  private void readAhead() {
    if (!options.realTime || !options.bounded() || !options.soleWriter) {
      return;
    }
    if (queue == null) {
      queue = OutputQueue.of(options);
    }
    nextReading = OFFSET_COMMITS.submit(queue::reading);
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    long written = 0;
    long skipped = 0;
    int sleeps = 0;
    List<TaskCommit> tasks = new ArrayList<>();
    for (WriterCommitMessage message : messages) {
      if (message instanceof TaskCommit task) {
        tasks.add(task);
        written += task.written();
        skipped += task.skipped();
        sleeps = Math.max(sleeps, task.sleeps()); // the query's: its tasks sleep side by side
      }
    }
    recordOutput(epochId, tasks.toArray(TaskCommit[]::new));
    SinkFailpoints.reach("driver-commit", epochId, 0);
    if (options.realTime) {
      commitInputOffsetsBehind(epochId);
      readAhead();
    } else {
      commitInputOffsets(epochId);
    }
    metrics.batch(epochId, written, skipped, sleeps);
    if (skipped > 0) {
      LOG.info(
          "{}: micro-batch {}: {} tuples written, {} skipped as committed before",
          options.where(),
          epochId,
          written,
          skipped);
    }
  }

  /**
   * An at-least-once query's {@link OutputLog} entry for the batch, before Spark's commit log, so
   * that the audit can count its replays. With exactly-once delivery a replay writes nothing twice
   * (and transaction markers take offsets): no entry.
   *
   * @throws UncheckedIOException the entry cannot be written (the batch then fails, and is run
   *     again)
   */
  private void recordOutput(long epochId, TaskCommit[] tasks) {
    if (options.exactlyOnce() || options.checkpointLocation == null) {
      return;
    }
    if (outputLog == null) {
      outputLog =
          new OutputLog(
              options.checkpointLocation,
              SparkSession.active().sparkContext().hadoopConfiguration());
    }
    try {
      outputLog.record(epochId, tasks);
    } catch (IOException e) {
      throw new UncheckedIOException(
          options.where() + ": cannot write the output log of micro-batch " + epochId, e);
    }
  }

  /**
   * A real-time batch's commit of its input offsets, in the background: the next batch starts as
   * soon as this one's commit returns, and its tasks are then reading nothing (the real-time
   * latency's tail is made of these gaps). Commits run one after another, never out of order; a
   * failure that fails the query ({@link #offsetsNotCommitted}) is raised by the next batch's
   * commit.
   */
  private void commitInputOffsetsBehind(long epochId) {
    Future<?> previous = pendingCommit;
    if (previous != null) {
      try {
        previous.get();
      } catch (ExecutionException e) {
        throw e.getCause() instanceof RuntimeException r ? r : new IllegalStateException(e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted committing the input offsets", e);
      }
    }
    pendingCommit = OFFSET_COMMITS.submit(() -> commitInputOffsets(epochId));
  }

  private void commitInputOffsets(long epochId) {
    if (options.consumerGroup == null || options.inputTopics.isEmpty()) {
      return;
    }
    // Spark logs a real-time batch's offsets only after its write has committed (the batch's
    // end is where its tasks stopped): the group gets the previous batch's, where this one began.
    long logged = options.realTime ? epochId - 1 : epochId;
    if (logged < 0) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> offsets;
    try {
      offsets =
          InputOffsets.of(
              options.checkpointLocation,
              logged,
              options.inputTopics,
              SparkSession.active().sparkContext().hadoopConfiguration());
    } catch (IOException e) {
      throw new UncheckedIOException(
          options.where() + ": cannot read the offset log of micro-batch " + logged, e);
    }
    if (offsets.isEmpty()) {
      return;
    }
    try {
      TransactionalProducers.admin(options)
          .alterConsumerGroupOffsets(
              options.consumerGroup,
              offsets,
              new AlterConsumerGroupOffsetsOptions().timeoutMs((int) OFFSET_COMMIT_TIMEOUT_MS))
          .all()
          .get(OFFSET_COMMIT_TIMEOUT_MS + 5_000, TimeUnit.MILLISECONDS);
      offsetsFailingSince = -1;
    } catch (ExecutionException | TimeoutException e) {
      offsetsNotCommitted(epochId, e instanceof ExecutionException ? e.getCause() : e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted committing the input offsets", e);
    }
  }

  /**
   * A written micro-batch whose input offsets did not reach the consumer group: the group stays
   * behind the output until a later micro-batch's commit, which is safe (a restart reads its
   * checkpoint, and a group behind only makes the input stream queue read longer), so the query
   * goes on, as Flink's Kafka source goes on when an offset commit on a checkpoint fails. It fails
   * on an authorization error, which no later commit heals, and once commits have failed for {@link
   * #OFFSETS_BEHIND_LIMIT_MS}: a group that stays behind keeps the input stream queue looking full,
   * and its producers blocked.
   *
   * @throws IllegalStateException naming the batch, the group and the broker's answer
   */
  private void offsetsNotCommitted(long epochId, Throwable cause) {
    metrics.offsetCommitFailed();
    long now = System.nanoTime();
    if (offsetsFailingSince < 0) {
      offsetsFailingSince = now;
    }
    long failingMs = TimeUnit.NANOSECONDS.toMillis(now - offsetsFailingSince);
    String what =
        options.where()
            + ": micro-batch "
            + epochId
            + " is written, but its input offsets were not committed to consumer group '"
            + options.consumerGroup
            + "' (commits failing for "
            + failingMs
            + " ms): "
            + cause;
    if (cause instanceof AuthorizationException || failingMs > OFFSETS_BEHIND_LIMIT_MS) {
      throw new IllegalStateException(what, cause);
    }
    LOG.warn("{}; the group stays behind the output until a later micro-batch's commit", what);
  }

  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    LOG.warn(
        "{}: micro-batch {} aborted; its tasks' transactions were aborted, and a replay writes"
            + " the partitions not committed",
        options.where(),
        epochId);
  }
}
