package io.floodgate.spark;

import io.floodgate.spark.alignment.EventTimeAligner;
import io.floodgate.spark.alignment.EventTimeAligners;
import io.floodgate.spark.offsets.InitialOffsetLog;
import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.OptionText;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.RowLayout;
import io.floodgate.spark.read.TaskMetrics;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/**
 * A scan of the topics read: the micro-batch stream of a streaming query, or a batch query's read.
 */
final class KafkaScan implements Scan {
  private final StructType schema;
  private final StructType required;
  private final SourceOptions options;
  private final BatchBounds bounds;

  KafkaScan(StructType schema, StructType required, SourceOptions options, BatchBounds bounds) {
    this.schema = schema;
    this.required = required;
    this.options = options;
    this.bounds = bounds;
  }

  @Override
  public StructType readSchema() {
    return required;
  }

  @Override
  public String description() {
    return "floodgate_kafka[" + options.describe() + "]";
  }

  /**
   * The stream of a streaming query. Spark gives it the source's own checkpoint directory ({@code
   * <checkpoint>/sources/<n>}), where the stream keeps its first offsets ({@link
   * InitialOffsetLog}), opened with the session's Hadoop configuration (a checkpoint on HDFS or
   * object storage too).
   */
  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    String refusal = bounds.streamingRefusal();
    if (refusal != null) {
      throw OptionText.refuse(refusal);
    }
    RowLayout layout = new RowLayout(required, FloodgateKafkaProvider.avroSchema(options), options);
    EventTimeAligner aligner =
        options.maxEventTimeDriftMs == null ? EventTimeAligner.NONE : EventTimeAligners.of(options);
    InitialOffsetLog firstOffsets =
        new InitialOffsetLog(
            checkpointLocation, SparkSession.active().sessionState().newHadoopConf());
    return new KafkaMicroBatchStream(options, required, layout, aligner, firstOffsets);
  }

  @Override
  public Batch toBatch() {
    RowLayout layout = new RowLayout(required, FloodgateKafkaProvider.avroSchema(options), options);
    return new KafkaBatch(options, required, layout, bounds);
  }

  /** What the tasks count ({@link TaskMetrics}), as Spark's Kafka scan declares its own. */
  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return TaskMetrics.supported();
  }
}
