package io.floodgate.spark.write;

import io.floodgate.spark.RealTimeEnds;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A write task's admission to a bounded output stream queue ({@code maxQueueSize}): whether its
 * tuples fit in its share of the queue's free space, sleeping {@code sleepOnOverStoreMs} and
 * reading the queue again up to {@code sleepOnOverStoreRetryCount} times (logging {@code
 * FG-QG-001}) when they do not.
 *
 * <p>A micro-batch task asks once, for all its held tuples and a commit marker per output partition
 * ({@link #admit}); a task in Spark's Real-Time Mode asks before each tuple ({@link #admitNext}),
 * sharing the batch's room with the batch's other tasks in the JVM ({@link RealTimeShares}) and
 * adding their share of what the queue's readers consumed since the batch began.
 *
 * <p>Giving up throws {@link OutputQueueFullException} ({@code FG-QG-002}), or at once {@link
 * OversizedOutputException} ({@code FG-QG-005}) for tuples over the task's share of the whole
 * queue; either is remembered ({@link GaveUp}) so that a retry of the task gives up at once. A
 * retry (attempt above 0) never sleeps.
 */
final class QueueAdmission {
  /**
   * The write task's logger: {@code FG-QG-001} is logged under the task's name, with its other
   * lines.
   */
  private static final Logger LOG = LoggerFactory.getLogger(KafkaDataWriter.class);

  private final SinkOptions options;
  private final TaskClients clients;
  private final String queryId;
  private final int partition;
  private final int tasks;
  private final long batch;

  /** The task's share of the queue's free space when the batch began, offsets. */
  private final long share;

  /** The queue's free space when the batch began, offsets. */
  private final long free;

  /** This run of the batch, as the driver named it ({@link RealTimeShares}). */
  private final String run;

  /** Where the queue's readers were when the batch began ({@link OutputQueue.Reading}). */
  private final long consumedAtStart;

  /** In a real-time batch to a bounded queue, the room its tasks in this JVM share. */
  private RealTimeShares shares;

  private int sleeps;

  QueueAdmission(
      SinkOptions options,
      TaskClients clients,
      String queryId,
      int partition,
      int tasks,
      long share,
      long free,
      long consumedAtStart,
      String run,
      long batch) {
    this.options = options;
    this.clients = clients;
    this.queryId = queryId;
    this.partition = partition;
    this.tasks = tasks;
    this.share = share;
    this.free = free;
    this.consumedAtStart = consumedAtStart;
    this.run = run;
    this.batch = batch;
  }

  /** How often the task slept on a full queue. */
  int sleeps() {
    return sleeps;
  }

  /**
   * Wait until a micro-batch task's held tuples fit in its share of the queue.
   *
   * @param tuples how many tuples the task holds
   * @param outputPartitions how many partitions the output stream has
   * @param attempt the task's attempt number (Spark's {@code TaskContext.attemptNumber})
   * @throws OversizedOutputException they need more than the task's share of the whole queue
   * @throws OutputQueueFullException they still did not fit after every sleep
   */
  void admit(int tuples, int outputPartitions, int attempt) {
    long required = FreeSpaceShare.required(tuples, Math.min(tuples, outputPartitions));
    if (required <= share) {
      return;
    }
    long most = FreeSpaceShare.of(options.maxQueueSize, tasks, partition);
    if (required > most) {
      throw GaveUp.remember(
          queryId,
          batch,
          partition,
          new OversizedOutputException(
              options.where(),
              options.stream,
              batch,
              partition,
              tasks,
              required,
              options.maxQueueSize));
    }
    SleepingTasks.enter(options.queryGroup, options.query, options.stream);
    try {
      waitForRoom(required, attempt == 0 ? options.sleepOnOverStoreRetryCount : 0);
    } finally {
      SleepingTasks.exit(options.queryGroup, options.query, options.stream);
    }
  }

  /**
   * In a real-time batch, wait until one more tuple fits in the room the batch's tasks in this JVM
   * share ({@link RealTimeShares}): reading how far the queue's readers got when the room runs out,
   * then sleeping and reading again.
   *
   * @param attempt the task's attempt number
   * @throws OutputQueueFullException it still did not fit after every sleep
   */
  void admitNext(int attempt) {
    if (shares == null) {
      shares = RealTimeShares.join(queryId, run, free, tasks, partition);
    }
    if (shares.take()) {
      return;
    }
    reread();
    if (shares.take()) {
      return;
    }
    int retries = attempt == 0 ? options.sleepOnOverStoreRetryCount : 0;
    SleepingTasks.enter(options.queryGroup, options.query, options.stream);
    try {
      while (!shares.take()) {
        if (sleeps >= retries) {
          throw full(shares.written() + 1, shares.room(), true);
        }
        sleeps++;
        LOG.warn(
            "FG-QG-001 {}: output stream {} has room for {} tuples of real-time batch {}, all"
                + " written; task {} sleeps {} ms before retry {} of {}",
            options.where(),
            options.stream,
            shares.room(),
            batch,
            partition,
            options.sleepOnOverStoreMs,
            sleeps,
            retries);
        sleep(options.sleepOnOverStoreMs);
        reread();
      }
    } finally {
      SleepingTasks.exit(options.queryGroup, options.query, options.stream);
    }
  }

  /**
   * In a real-time batch, when the room is (all but a tuple per task) written and the readers
   * consumed nothing more, ask the task's source to end its part of the batch ({@link
   * RealTimeEnds}): the batch then commits what was written, and the next one waits on the queue
   * before it writes, so that a hold, should one come, replays nothing this batch wrote. Called
   * after {@link #admitNext}.
   */
  void endIfFull() {
    if (shares.roomForEveryMember()) {
      return;
    }
    reread();
    if (!shares.roomForEveryMember()) {
      LOG.info(
          "{}: output stream {} is full ({} of real-time batch {} written): task {} ends its part"
              + " of the batch",
          options.where(),
          options.stream,
          shares.written(),
          batch,
          partition);
      RealTimeEnds.request();
    }
  }

  /** The task gives up on a full queue, remembered so that its retry gives up at once. */
  private RuntimeException full(long required, long allowed, boolean realTime) {
    return GaveUp.remember(
        queryId,
        batch,
        partition,
        new OutputQueueFullException(
            options.where(),
            options.stream,
            batch,
            partition,
            tasks,
            required,
            allowed,
            options.maxQueueSize,
            sleeps,
            realTime));
  }

  /** Read how far the queue's readers got since the batch began. */
  private void reread() {
    shares.consumed(Math.max(0, clients.queueReading().consumed() - consumedAtStart));
  }

  private void waitForRoom(long required, int retries) {
    long allowed = share;
    while (required > allowed) {
      if (sleeps >= retries) {
        throw full(required, allowed, false);
      }
      sleeps++;
      LOG.warn(
          "FG-QG-001 {}: output stream {} has room for {} of micro-batch {} task {}'s {}:"
              + " sleeping {} ms before retry {} of {}",
          options.where(),
          options.stream,
          allowed,
          batch,
          partition,
          required,
          options.sleepOnOverStoreMs,
          sleeps,
          retries);
      sleep(options.sleepOnOverStoreMs);
      if (options.soleWriter) {
        allowed =
            Math.max(
                allowed,
                FreeSpaceShare.reread(
                    options.maxQueueSize, clients.queueReading().length(), 0, tasks, partition));
      }
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(
          "interrupted while sleeping on a full output stream queue", e);
    }
  }
}
