package io.floodgate.spark.write;

import io.floodgate.spark.RealTimeReads;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One write task's partition of a micro-batch, produced in one Kafka transaction of its own.
 *
 * <p>On its first row the task takes its partition's transactional producer ({@link
 * TransactionalProducers}; a new one's {@code initTransactions} fences any earlier attempt of the
 * partition, a zombie, and ends its open transaction) and reads its batch marker ({@link
 * BatchMarker}): a partition already committed skips its rows. Otherwise it encodes each row as an
 * output tuple ({@link TupleEncoder}).
 *
 * <p>To an unbounded output stream it sends each tuple at once, in its open transaction. To a
 * bounded one it keeps the encoded tuples until its last row, so that it knows what it needs before
 * it sends anything: its tuples and a commit marker per output partition ({@link
 * FreeSpaceShare#required}). When that is more than its share of the queue's free space, it sleeps
 * {@code sleepOnOverStoreMs} and reads the queue again, up to {@code sleepOnOverStoreRetryCount}
 * times, then fails with {@link OutputQueueFullException} ({@code FG-QG-002}) having sent nothing:
 * a full queue is never filled with records that are then aborted. A task that needs more than its
 * share of the whole queue fails at once ({@link OversizedOutputException}, {@code FG-QG-005}).
 * Then it sends them, its batch marker, and commits.
 *
 * <p>A task with no row writes nothing, not even a marker. Any failure aborts the transaction:
 * nothing of the task is visible to {@code read_committed} readers, and Spark retries the task or
 * fails the query, whose replay writes it again. A retry of a task that gave up on the queue gives
 * up at once, without sleeping again.
 *
 * <p>In Spark's Real-Time Mode ({@link SinkOptions#realTime}) a task lasts its whole batch, rows
 * arriving as the source reads them, so it cannot keep its tuples until its last row: it sends each
 * at once, and a bounded queue is checked as they go ({@link QueueAdmission#admitNext}). The task
 * may send while its tuples fit in its share; when they no longer do, it reads how far the queue's
 * readers got and may add its share of what they consumed since the batch began. When they consumed
 * nothing more, it sleeps and reads again, as above, then gives up, and the group is held.
 *
 * <p>A real-time task with exactly-once delivery writes its whole batch in one transaction, so its
 * output reaches {@code read_committed} readers at the batch's end, and commits with it the input
 * position it read to ({@link InputMarker}) instead of a batch marker: its reader runs in the same
 * task ({@link RealTimeReads}, a query with no shuffle), so each row's input offset is known, and a
 * task run again after a crash skips the rows from offsets its marker covers. With at-least-once
 * what a real-time task sent before it gave up stays, and the replay after the release sends it
 * again.
 *
 * <p>With {@code delivery = at-least-once} ({@link SinkOptions#exactlyOnce()} false) the task's
 * idempotent producer sends with no transaction and no batch marker: each tuple is readable once
 * the broker has it, a failed task leaves what it sent, and Spark's retry or a replay of the batch
 * sends it again: duplicates, never a loss.
 */
final class KafkaDataWriter implements DataWriter<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(KafkaDataWriter.class);

  private final SinkOptions options;
  private final TaskClients clients;
  private final TupleEncoder encoder;
  private final String queryId;
  private final int partition;
  private final long batch;
  private final String transactionalId;
  private final BatchMarker marker;

  /** A real-time task's marker, with exactly-once delivery. */
  private final InputMarker inputMarker;

  /** Where a real-time task's reader stands, with exactly-once delivery. */
  private RealTimeReads.Position source;

  /** A real-time task's input partition; rows from offsets below {@link #skipBelow} are skipped. */
  private TopicPartition input;

  private long skipBelow = -1;
  private final AtomicReference<Exception> sendError = new AtomicReference<>();

  /** Per output partition, the offset after this attempt's last acknowledged tuple. */
  private final Map<Integer, Long> ends = new ConcurrentHashMap<>();

  private final Callback onSent =
      (metadata, error) -> {
        if (error != null) {
          sendError.compareAndSet(null, error);
        } else if (metadata.hasOffset()) {
          ends.merge(metadata.partition(), metadata.offset() + 1, Math::max);
        }
      };

  /** The encoded tuples of a bounded queue's task, until it knows they fit. */
  private final List<byte[][]> held = new ArrayList<>();

  private Producer<byte[], byte[]> producer;
  private ConnectionWatch.Watched watched;
  private boolean started;
  private boolean skipping;
  private boolean inTransaction;
  private long written;
  private long skipped;

  /** The task's admission to a bounded output stream queue. */
  private final QueueAdmission admission;

  KafkaDataWriter(
      SinkOptions options,
      TaskClients clients,
      TupleEncoder encoder,
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
    this.encoder = encoder;
    this.queryId = queryId;
    this.partition = partition;
    this.batch = batch;
    this.admission =
        new QueueAdmission(
            options, clients, queryId, partition, tasks, share, free, consumedAtStart, run, batch);
    this.transactionalId = options.transactionalId(partition);
    this.marker = new BatchMarker(queryId, transactionalId, options.topic);
    this.inputMarker = new InputMarker(queryId, options.transactionalIdPrefix);
    if (options.realTime) {
      RealTimeReads.writerStarts();
    }
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (!started) {
      start();
    }
    if (skipping) {
      skipped++;
      return;
    }
    if (source != null && !inTransaction) {
      if (source.lastRowOffset() < skipBelow) {
        skipped++; // committed before a crash, in this batch's first run or an earlier batch
        return;
      }
      begin();
    }
    byte[] key = encoder.key(row);
    byte[] value = encoder.value(row);
    if (options.bounded() && !options.realTime) {
      held.add(new byte[][] {key, value});
      return;
    }
    if (options.bounded()) {
      admission.admitNext(attemptNumber());
      send(key, value);
      admission.endIfFull();
      return;
    }
    send(key, value);
  }

  private void send(byte[] key, byte[] value) throws IOException {
    requireNoRefusal();
    producer.send(new ProducerRecord<>(options.topic, key, value), onSent);
    written++;
  }

  private void start() {
    started = true;
    GaveUp.again(queryId, batch, partition, attemptNumber());
    producer = clients.take(transactionalId);
    if (!options.exactlyOnce()) {
      return;
    }
    if (options.realTime && startRealTime()) {
      return;
    }
    long committed = clients.lastCommitted(marker);
    if (committed >= batch) {
      skipping = true;
      LOG.info(
          "{}: {} {} task {} was committed before (marker of batch {}): its rows are skipped",
          options.where(),
          options.realTime ? "real-time batch" : "micro-batch",
          batch,
          partition,
          committed);
      return;
    }
    if (!options.bounded() || options.realTime) {
      begin(); // a real-time task sends each tuple as it comes, in the batch's transaction
    }
  }

  /**
   * Find the task's reader and the input offset below which its output is committed; a task with no
   * reader of its own (after a shuffle) commits by its batch marker instead, as in a micro-batch,
   * when the source logs where its real-time tasks stopped ({@code sourceEndsLogged}): a batch run
   * again then reads the same input.
   *
   * @return whether the task commits its input position ({@link InputMarker}); {@code false}: its
   *     batch marker ({@link BatchMarker})
   * @throws IllegalStateException the task reads no input of its own and the source logs no ends,
   *     so a replay could read other input than what the task committed output for
   */
  private boolean startRealTime() {
    source = clients.sourcePosition();
    if (source == null) {
      if (options.sourceEndsLogged) {
        return false;
      }
      throw new IllegalStateException(
          options.where()
              + ": real-time batch "
              + batch
              + " task "
              + partition
              + ": exactly-once delivery in real time needs the source's reader in the write task,"
              + " or a source that logs where its real-time tasks stop (floodgate_kafka's"
              + " realTimeEndsGroup, with sourceEndsLogged = true here), and this task reads no"
              + " input of its own (a shuffle lies between them: an aggregation, a join); set"
              + " delivery = 'at-least-once'");
    }
    input = source.inputPartition();
    skipBelow = clients.writtenTo(inputMarker, input);
    if (skipBelow > source.lastRowOffset()) {
      LOG.info(
          "{}: real-time batch {} task {}: the output of {} below offset {} was committed before;"
              + " its rows are skipped",
          options.where(),
          batch,
          partition,
          input,
          skipBelow);
    }
    return true;
  }

  private void begin() {
    producer.beginTransaction();
    inTransaction = true;
    watched =
        ConnectionWatch.open(
            producer, options.where() + " micro-batch " + batch + " task " + partition);
  }

  /**
   * Refuse to go on with a transaction one of whose records the broker refused.
   *
   * @throws IOException naming the topic and the broker's answer
   */
  private void requireNoRefusal() throws IOException {
    Exception failed = sendError.get();
    if (failed != null) {
      throw new IOException(failure("a record was refused", failed), failed);
    }
  }

  /**
   * Refuse to go on with a transaction across which the producer lost a broker connection ({@link
   * ConnectionWatch}, which has closed the producer already): the task fails, and Spark's retry
   * writes the partition again with a new producer.
   *
   * @throws BrokerLostException a connection of the producer closed since the transaction began
   */
  private void requireConnected(String step) {
    if (watched != null && watched.connectionLost()) {
      throw new BrokerLostException(
          "FG-QG-008 "
              + options.where()
              + ": micro-batch "
              + batch
              + " task "
              + partition
              + ": the producer lost its broker connection "
              + step
              + "; the transaction is dropped and the task written again by a new producer");
    }
  }

  @Override
  public TaskCommit commit() throws IOException {
    if (!started) {
      // A retry with no row (in real time: one that began past the batch's deadline) of a task
      // that gave up gives up too, or the batch would end as if its output had fit.
      GaveUp.again(queryId, batch, partition, attemptNumber());
    }
    if (!started || skipping || (source != null && !inTransaction)) {
      release();
      return new TaskCommit(partition, 0, skipped, 0, Map.of());
    }
    int attempt = attemptNumber();
    if (options.bounded() && !options.realTime) {
      admission.admit(held.size(), outputPartitions(), attempt);
      if (options.exactlyOnce()) {
        begin();
      }
      for (byte[][] record : held) {
        send(record[0], record[1]);
      }
      held.clear();
    }
    SinkFailpoints.reach("mid-transaction", batch, attempt);
    producer.flush();
    requireNoRefusal();
    SinkFailpoints.reach("records-sent", batch, attempt);
    if (!options.exactlyOnce()) {
      release();
      return new TaskCommit(partition, written, skipped, admission.sleeps(), Map.copyOf(ends));
    }
    requireConnected("while its records were sent");
    producer.sendOffsetsToTransaction(committedWith(), committedBy());
    SinkFailpoints.reach("before-commit", batch, attempt);
    requireConnected("before its commit");
    producer.commitTransaction();
    inTransaction = false;
    ConnectionWatch.closed(watched);
    SinkFailpoints.reach("after-commit", batch, attempt);
    release();
    return new TaskCommit(partition, written, skipped, admission.sleeps(), Map.copyOf(ends));
  }

  /** The marker the task's transaction commits: its input position in real time, else its batch. */
  private Map<TopicPartition, OffsetAndMetadata> committedWith() {
    return source != null
        ? inputMarker.of(input, source.nextOffset(), batch, written)
        : marker.of(batch, written);
  }

  private ConsumerGroupMetadata committedBy() {
    return source != null ? inputMarker.groupMetadata() : marker.groupMetadata();
  }

  private int outputPartitions() {
    return producer.partitionsFor(options.topic).size();
  }

  private static int attemptNumber() {
    TaskContext context = TaskContext.get();
    return context == null ? 0 : context.attemptNumber();
  }

  private String failure(String what, Exception cause) {
    return options.where()
        + ": micro-batch "
        + batch
        + " task "
        + partition
        + ": "
        + what
        + " by topic '"
        + options.topic
        + "' ("
        + cause
        + "); the transaction is aborted";
  }

  /** Give the producer back for the next task, its transaction ended. */
  private void release() {
    if (producer != null) {
      clients.give(transactionalId, producer);
      producer = null;
    }
  }

  @Override
  public void abort() {
    held.clear();
    if (producer == null) {
      return;
    }
    if (!options.exactlyOnce()) {
      closeProducer(); // what it sent stays; the retry or replay sends it again
      return;
    }
    ConnectionWatch.closed(watched);
    if (watched != null && watched.connectionLost()) {
      closeProducer(); // never an abort: noida-db's marker would end the stray records too
      return;
    }
    try {
      if (inTransaction) {
        producer.abortTransaction();
        inTransaction = false;
      }
      release();
    } catch (RuntimeException e) {
      LOG.warn(
          "{}: micro-batch {} task {}: the abort failed; the producer is closed and its"
              + " transaction ends when the next producer of {} starts",
          options.where(),
          batch,
          partition,
          transactionalId,
          e);
      closeProducer();
    }
  }

  @Override
  public void close() {
    if (options.realTime) {
      RealTimeReads.writerEnds();
    }
    ConnectionWatch.closed(watched);
    held.clear();
    if (producer != null) {
      // Neither committed nor aborted (the task failed in commit): never pooled.
      closeProducer();
    }
  }

  private void closeProducer() {
    Producer<byte[], byte[]> p = producer;
    producer = null;
    inTransaction = false;
    if (p != null) {
      p.close(Duration.ZERO);
    }
  }
}
