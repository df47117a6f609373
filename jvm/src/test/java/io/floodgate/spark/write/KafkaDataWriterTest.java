package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.RealTimeReads;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.internals.DefaultPartitioner;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * A write task against Kafka's {@code MockProducer}: what it sends, in which transaction, with
 * which batch marker, and what it does when its partition was committed before or its share of the
 * output stream queue is too small.
 */
class KafkaDataWriterTest {
  private static final String TOPIC = "out";
  private static final Schema SCHEMA =
      new Schema.Parser()
          .parse(
              "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"carrier\",\"type\":\"string\"},"
                  + "{\"name\":\"flights\",\"type\":\"long\"}]}");
  private static final StructType ROWS =
      new StructType().add("carrier", DataTypes.StringType).add("flights", DataTypes.LongType);

  /** Clients of one task: a mock producer, a marker and a queue length given by the test. */
  private static final class Clients implements TaskClients {
    final MockProducer<byte[], byte[]> producer;
    long committedBatch = -1;
    long writtenTo = -1;
    Reading source;
    final Deque<OutputQueue.Reading> readings = new ArrayDeque<>();
    final List<String> given = new ArrayList<>();

    Clients() {
      this(true);
    }

    Clients(boolean transactional) {
      producer = mockProducer(transactional);
    }

    @Override
    public Producer<byte[], byte[]> take(String transactionalId) {
      return producer;
    }

    @Override
    public void give(String transactionalId, Producer<byte[], byte[]> p) {
      given.add(transactionalId);
    }

    @Override
    public long lastCommitted(BatchMarker marker) {
      return committedBatch;
    }

    @Override
    public long writtenTo(InputMarker marker, TopicPartition input) {
      return writtenTo;
    }

    @Override
    public RealTimeReads.Position sourcePosition() {
      return source;
    }

    @Override
    public OutputQueue.Reading queueReading() {
      return readings.isEmpty() ? new OutputQueue.Reading(0, 0) : readings.pop();
    }
  }

  /** A real-time task's reader, moved by the test: the row written next came from {@code last}. */
  private static final class Reading implements RealTimeReads.Position {
    long last = -1;

    @Override
    public TopicPartition inputPartition() {
      return new TopicPartition("in", 2);
    }

    @Override
    public long lastRowOffset() {
      return last;
    }

    @Override
    public long nextOffset() {
      return last + 1;
    }
  }

  private static MockProducer<byte[], byte[]> mockProducer(boolean transactional) {
    Node node = new Node(0, "localhost", 9092);
    List<PartitionInfo> partitions = new ArrayList<>();
    for (int p = 0; p < 3; p++) {
      partitions.add(new PartitionInfo(TOPIC, p, node, new Node[] {node}, new Node[] {node}));
    }
    Cluster cluster =
        new Cluster("c", List.of(node), partitions, java.util.Set.of(), java.util.Set.of());
    @SuppressWarnings("deprecation")
    MockProducer<byte[], byte[]> producer =
        new MockProducer<>(
            cluster,
            true,
            new DefaultPartitioner(),
            new ByteArraySerializer(),
            new ByteArraySerializer());
    if (transactional) {
      producer.initTransactions();
    }
    return producer;
  }

  private static SinkOptions options(Map<String, String> extra) {
    Map<String, String> options = new HashMap<>();
    options.put("topic", TOPIC);
    options.put("kafka.bootstrap.servers", "localhost:9092");
    options.put("schema", "r");
    options.put("schemas", "{}");
    options.put("transactionalIdPrefix", "g.copy.sink");
    options.put("queryGroup", "g");
    options.put("query", "copy");
    options.putAll(extra);
    return SinkOptions.parse(options);
  }

  private static KafkaDataWriter writer(
      SinkOptions options, Clients clients, int partition, int tasks, long share) {
    TupleEncoder encoder = TupleEncoder.singleObject("out", ROWS, SCHEMA, List.of("carrier"));
    return new KafkaDataWriter(
        options, clients, encoder, "q-1", partition, tasks, share, share * tasks, 1_000, "r", 7);
  }

  /** The first transaction's offset commit of consumer group {@code group} on {@code tp}. */
  private static OffsetAndMetadata firstCommit(Clients clients, String group, TopicPartition tp) {
    return clients.producer.consumerGroupOffsetsHistory().get(0).get(group).get(tp);
  }

  private static InternalRow row(String carrier, long flights) {
    return new GenericInternalRow(new Object[] {UTF8String.fromString(carrier), flights});
  }

  @Test
  void aTaskSendsItsRowsAndItsBatchMarkerInOneCommittedTransaction() throws Exception {
    Clients clients = new Clients();
    KafkaDataWriter task = writer(options(Map.of()), clients, 1, 2, Long.MAX_VALUE);
    task.write(row("AA", 3));
    task.write(row("UA", 5));
    TaskCommit commit = task.commit();
    task.close();

    assertCommitted(commit, 1, 2, 0, 0);
    assertTrue(clients.producer.transactionCommitted());
    assertEquals(2, clients.producer.history().size());
    assertEquals("AA", new String(clients.producer.history().get(0).key()));
    OffsetAndMetadata marker = firstCommit(clients, "g.copy.sink.1", new TopicPartition(TOPIC, 0));
    assertEquals(7, marker.offset());
    assertEquals(7, BatchMarker.lastCommitted("q-1", marker));
    assertEquals(List.of("g.copy.sink.1"), clients.given); // pooled for the next batch
  }

  @Test
  void aPartitionCommittedBeforeACrashSkipsItsRowsAndSendsNothing() throws Exception {
    Clients clients = new Clients();
    clients.committedBatch = 7;
    KafkaDataWriter task = writer(options(Map.of()), clients, 0, 2, Long.MAX_VALUE);
    task.write(row("AA", 3));
    task.write(row("UA", 5));
    assertCommitted(task.commit(), 0, 0, 2, 0);
    assertTrue(clients.producer.history().isEmpty());
    assertFalse(clients.producer.transactionInFlight());
  }

  @Test
  void aTaskWithNoRowWritesNothingNotEvenAMarker() throws Exception {
    Clients clients = new Clients();
    KafkaDataWriter task = writer(options(Map.of()), clients, 0, 2, Long.MAX_VALUE);
    assertCommitted(task.commit(), 0, 0, 0, 0);
    assertTrue(clients.producer.consumerGroupOffsetsHistory().isEmpty());
  }

  @Test
  void outputOverItsShareSleepsThenGivesUpHavingSentNothing() throws Exception {
    Clients clients = new Clients();
    clients.readings.add(
        new OutputQueue.Reading(95, 0)); // a read after the sleep: 5 free of 100, 3 for task 0
    SinkOptions bounded =
        options(
            Map.of(
                "maxQueueSize", "100",
                "sleepOnOverStoreMs", "1",
                "sleepOnOverStoreRetryCount", "1"));
    KafkaDataWriter task = writer(bounded, clients, 0, 2, 2);
    task.write(row("AA", 3));
    task.write(row("UA", 5));
    OutputQueueFullException full = assertThrows(OutputQueueFullException.class, task::commit);
    task.abort();
    task.close();
    assertTrue(
        full.getMessage()
            .startsWith(
                "FG-QG-002 query group g query copy: output stream out is full: micro-batch 7 task"
                    + " 0 of 2 needs 4 offsets, its share of the free space is 3 (max_queue_size"
                    + " 100) after 1 sleep(s)"),
        full.getMessage());
    assertTrue(clients.producer.history().isEmpty());
    assertFalse(clients.producer.transactionInFlight());
  }

  @Test
  void outputOverItsShareIsWrittenOnceAReadFindsRoom() throws Exception {
    Clients clients = new Clients();
    clients.readings.add(
        new OutputQueue.Reading(0, 0)); // the readers caught up: 100 free, 50 a task
    SinkOptions bounded =
        options(
            Map.of(
                "maxQueueSize", "100",
                "sleepOnOverStoreMs", "1",
                "sleepOnOverStoreRetryCount", "3"));
    KafkaDataWriter task = writer(bounded, clients, 0, 2, 2);
    task.write(row("AA", 3));
    task.write(row("UA", 5));
    assertCommitted(task.commit(), 0, 2, 0, 1);
    assertTrue(clients.producer.transactionCommitted());
    assertEquals(2, clients.producer.history().size());
  }

  @Test
  void outputOverItsShareOfTheWholeQueueFailsAtOnce() throws Exception {
    Clients clients = new Clients();
    SinkOptions bounded = options(Map.of("maxQueueSize", "6", "sleepOnOverStoreRetryCount", "5"));
    KafkaDataWriter task = writer(bounded, clients, 0, 2, 3);
    for (int i = 0; i < 3; i++) {
      task.write(row("AA", i));
    }
    OversizedOutputException oversized = assertThrows(OversizedOutputException.class, task::commit);
    assertTrue(oversized.getMessage().startsWith("FG-QG-005 query group g query copy"));
    assertTrue(oversized.getMessage().contains("(max_queue_size = 6 among 2 write tasks)"));
    assertTrue(clients.producer.history().isEmpty());
    assertTrue(clients.readings.isEmpty()); // no sleep, no read
  }

  @Test
  void atLeastOnceSendsEachTupleWithNoTransactionAndNoMarker() throws Exception {
    Clients clients = new Clients(false);
    KafkaDataWriter task =
        writer(options(Map.of("delivery", "at-least-once")), clients, 1, 2, Long.MAX_VALUE);
    task.write(row("AA", 3));
    assertEquals(1, clients.producer.history().size()); // sent at once
    task.write(row("UA", 5));
    task.write(row("UA", 6));
    TaskCommit commit = task.commit();
    assertCommitted(commit, 1, 3, 0, 0);
    task.close();
    // Where its tuples ended, per output partition: the offset after each one's last (the mock
    // numbers each partition's records from 0), for the driver's OutputLog.
    assertEquals(3L, commit.ends().values().stream().mapToLong(Long::longValue).sum());
    assertEquals(2, commit.ends().size(), commit.ends().toString()); // AA and UA: two partitions
    assertFalse(clients.producer.transactionInitialized());
    assertTrue(clients.producer.consumerGroupOffsetsHistory().isEmpty());
    assertEquals(List.of("g.copy.sink.1"), clients.given);
  }

  @Test
  void atLeastOnceLeavesWhatAFailedTaskSent() throws Exception {
    Clients clients = new Clients(false);
    KafkaDataWriter task =
        writer(options(Map.of("delivery", "at-least-once")), clients, 0, 1, Long.MAX_VALUE);
    task.write(row("AA", 3));
    task.abort();
    task.close();
    assertEquals(1, clients.producer.history().size());
    assertTrue(clients.producer.closed());
    assertTrue(clients.given.isEmpty()); // a failed task's producer is never pooled
  }

  @Test
  void aRealTimeTaskSendsAtOnceWhileItFitsThenReadsTheQueueAgain() throws Exception {
    Clients clients = new Clients(false);
    clients.readings.add(new OutputQueue.Reading(20, 1_080)); // 80 consumed, 40 for task 0
    KafkaDataWriter task = realTimeWriter(Map.of(), clients, 0, 2, 2);
    task.write(row("AA", 1));
    assertEquals(1, clients.readings.size()); // room left: not read yet
    task.write(row("UA", 2));
    assertEquals(2, clients.producer.history().size()); // sent at once
    assertTrue(clients.readings.isEmpty()); // its room all written: read again, and it grew
    task.write(row("DL", 3));
    assertCommitted(task.commit(), 0, 3, 0, 0);
    assertEquals(3, clients.producer.history().size());
  }

  @Test
  void aRealTimeTaskThatFindsNoRoomSleepsThenGivesUpKeepingWhatItSent() throws Exception {
    Clients clients = new Clients(false);
    clients.readings.add(new OutputQueue.Reading(100, 1_000)); // nothing consumed
    clients.readings.add(new OutputQueue.Reading(100, 1_000));
    KafkaDataWriter task =
        realTimeWriter(Map.of("sleepOnOverStoreRetryCount", "1"), clients, 0, 1, 1);
    task.write(row("AA", 1));
    OutputQueueFullException full =
        assertThrows(OutputQueueFullException.class, () -> task.write(row("UA", 2)));
    assertTrue(full.getMessage().contains("after 1 sleep(s)"), full.getMessage());
    task.abort();
    task.close();
    assertEquals(1, clients.producer.history().size());
    assertTrue(clients.readings.isEmpty()); // read once before the sleep, once after
  }

  @Test
  void aRealTimeExactlyOnceTaskSkipsRowsItsInputMarkerCoversAndCommitsWhereItsReaderStands()
      throws Exception {
    Clients clients = new Clients();
    clients.source = new Reading();
    clients.writtenTo = 12; // a first run of the batch wrote the rows of offsets 10 and 11
    Map<String, String> exactly = Map.of("realTime", "true", "maxQueueSize", "100");
    KafkaDataWriter task = writer(options(exactly), clients, 0, 1, 100);
    for (long offset = 10; offset < 14; offset++) {
      clients.source.last = offset;
      task.write(row("AA", offset));
    }
    assertCommitted(task.commit(), 0, 2, 2, 0);
    assertTrue(clients.producer.transactionCommitted());
    assertEquals(2, clients.producer.history().size());
    OffsetAndMetadata marker =
        firstCommit(clients, "g.copy.sink.input", new TopicPartition("in", 2));
    assertEquals(14, marker.offset()); // the reader's next offset
    assertEquals(14, InputMarker.writtenTo("q-1", marker));
    assertEquals(-1, InputMarker.writtenTo("another query", marker));
  }

  @Test
  void aRealTimeExactlyOnceTaskWhoseRowsTheMarkerAllCoversWritesNothing() throws Exception {
    Clients clients = new Clients();
    clients.source = new Reading();
    clients.writtenTo = 20;
    KafkaDataWriter task = writer(options(Map.of("realTime", "true")), clients, 0, 1, 100);
    clients.source.last = 19;
    task.write(row("AA", 19));
    assertCommitted(task.commit(), 0, 0, 1, 0);
    assertFalse(clients.producer.transactionInFlight());
    assertTrue(clients.producer.consumerGroupOffsetsHistory().isEmpty());
  }

  @Test
  void aRealTimeExactlyOnceTaskWithNoReaderOfItsOwnFailsNamingTheShuffle() {
    Clients clients = new Clients();
    KafkaDataWriter task = writer(options(Map.of("realTime", "true")), clients, 0, 1, 100);
    IllegalStateException refused =
        assertThrows(IllegalStateException.class, () -> task.write(row("AA", 1)));
    assertTrue(refused.getMessage().contains("a shuffle lies between them"), refused.getMessage());
    assertTrue(refused.getMessage().contains("realTimeEndsGroup"), refused.getMessage());
  }

  @Test
  void aRealTimeExactlyOnceTaskAfterAShuffleSendsEachRowAtOnceAndCommitsItsBatchMarker()
      throws Exception {
    Clients clients = new Clients();
    Map<String, String> logged =
        Map.of("realTime", "true", "sourceEndsLogged", "true", "maxQueueSize", "100");
    KafkaDataWriter task = writer(options(logged), clients, 1, 2, 100);
    task.write(row("AA", 3));
    assertTrue(clients.producer.transactionInFlight()); // sent at once, in the batch's transaction
    assertEquals(1, clients.producer.uncommittedRecords().size());
    task.write(row("UA", 5));
    assertCommitted(task.commit(), 1, 2, 0, 0);
    assertTrue(clients.producer.transactionCommitted());
    assertEquals(2, clients.producer.history().size());
    OffsetAndMetadata marker = firstCommit(clients, "g.copy.sink.1", new TopicPartition(TOPIC, 0));
    assertEquals(7, BatchMarker.lastCommitted("q-1", marker));
  }

  @Test
  void aRealTimeBatchRunAgainAfterAShuffleSkipsWhatItsMarkerSaysWasCommitted() throws Exception {
    Clients clients = new Clients();
    clients.committedBatch = 7; // the first run's transaction of this task committed
    Map<String, String> logged = Map.of("realTime", "true", "sourceEndsLogged", "true");
    KafkaDataWriter task = writer(options(logged), clients, 0, 2, 100);
    task.write(row("AA", 3));
    task.write(row("UA", 5));
    assertCommitted(task.commit(), 0, 0, 2, 0);
    assertTrue(clients.producer.history().isEmpty());
    assertFalse(clients.producer.transactionInFlight());
  }

  /** A task of a real-time batch of a query of its own (a batch's shares are kept per JVM). */
  private static KafkaDataWriter realTimeWriter(
      Map<String, String> extra, Clients clients, int partition, int tasks, long share) {
    TupleEncoder encoder = TupleEncoder.singleObject("out", ROWS, SCHEMA, List.of("carrier"));
    return new KafkaDataWriter(
        realTime(extra),
        clients,
        encoder,
        "q-" + java.util.UUID.randomUUID(),
        partition,
        tasks,
        share,
        share * tasks,
        1_000,
        java.util.UUID.randomUUID().toString(),
        7);
  }

  private static SinkOptions realTime(Map<String, String> extra) {
    Map<String, String> options = new HashMap<>(extra);
    options.put("maxQueueSize", "100");
    options.put("realTime", "true");
    options.put("delivery", "at-least-once");
    options.put("sleepOnOverStoreMs", "1");
    return options(options);
  }

  @Test
  void realTimeTasksInOneJvmShareTheirRoomSoAnIdleTaskStarvesNoOther() throws Exception {
    Clients clients = new Clients(false);
    String query = "q-" + java.util.UUID.randomUUID();
    TupleEncoder encoder = TupleEncoder.singleObject("out", ROWS, SCHEMA, List.of("carrier"));
    KafkaDataWriter busy =
        new KafkaDataWriter(
            realTime(Map.of()), clients, encoder, query, 0, 2, 2, 4, 1_000, query, 7);
    KafkaDataWriter idle =
        new KafkaDataWriter(
            realTime(Map.of()), clients, encoder, query, 1, 2, 2, 4, 1_000, query, 7);
    idle.write(row("UA", 0)); // joins, takes 1 of the 4
    for (int i = 0; i < 3; i++) {
      busy.write(row("AA", i)); // the idle task's unused room is the busy one's
    }
    assertEquals(4, clients.producer.history().size());
    clients.readings.add(new OutputQueue.Reading(4, 1_000)); // nothing consumed: full
    OutputQueueFullException full =
        assertThrows(OutputQueueFullException.class, () -> busy.write(row("AA", 9)));
    assertTrue(full.getMessage().contains("needs 5 offsets"), full.getMessage());
    assertTrue(full.getMessage().contains("what it sent stays"), full.getMessage());
  }

  private static void assertCommitted(
      TaskCommit commit, int partition, long written, long skipped, int sleeps) {
    assertEquals(
        List.of(partition, written, skipped, sleeps),
        List.of(commit.partition(), commit.written(), commit.skipped(), commit.sleeps()));
  }
}
