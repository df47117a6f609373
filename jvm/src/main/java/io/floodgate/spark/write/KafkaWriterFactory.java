package io.floodgate.spark.write;

import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.types.StructType;

/**
 * Shipped to the executors once per micro-batch: makes each write task's {@link KafkaDataWriter},
 * with the task's share of the output stream queue's free space as the driver read it.
 */
final class KafkaWriterFactory implements StreamingDataWriterFactory {
  private static final long serialVersionUID = 1L;

  private final SinkOptions options;
  private final StructType rowSchema;
  private final String queryId;
  private final int tasks;
  private final long free;
  private final long consumed;

  /** This run of the batch: a batch planned again (a restart, a release) is another run. */
  private final String run = java.util.UUID.randomUUID().toString();

  /**
   * @param options the sink's options
   * @param rowSchema the query's output columns
   * @param queryId Spark's id of the query
   * @param tasks the batch's write tasks ({@code PhysicalWriteInfo.numPartitions()})
   * @param free the output stream queue's free space when the batch started, offsets ({@code
   *     Long.MAX_VALUE}: unbounded)
   * @param consumed where its readers were then ({@link OutputQueue.Reading#consumed})
   */
  KafkaWriterFactory(
      SinkOptions options,
      StructType rowSchema,
      String queryId,
      int tasks,
      long free,
      long consumed) {
    this.options = options;
    this.rowSchema = rowSchema;
    this.queryId = queryId;
    this.tasks = tasks;
    this.free = free;
    this.consumed = consumed;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
    long share =
        free == Long.MAX_VALUE ? Long.MAX_VALUE : FreeSpaceShare.of(free, tasks, partitionId);
    return new KafkaDataWriter(
        options,
        TaskClients.pooled(options),
        encoder(),
        queryId,
        partitionId,
        tasks,
        share,
        free,
        consumed,
        run,
        epochId);
  }

  /** The output tuples' encoder (one per task: it is not thread-safe). */
  TupleEncoder encoder() {
    Schema schema = SinkSchemas.avro(options);
    return SinkSchemas.encoder(options, rowSchema, schema);
  }
}
