package io.floodgate.spark.write;

import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;

/**
 * Builds a streaming query's write to an output stream. As Spark's Kafka sink, it takes the three
 * output modes: append; update, whose changed rows are appended ({@code
 * SupportsStreamingUpdateAsAppend}); and complete, whose whole result is appended each micro-batch
 * ({@code SupportsTruncate}: a topic cannot be truncated, so readers see every batch's result in
 * turn, the newest last).
 */
public final class KafkaWriteBuilder
    implements WriteBuilder, SupportsTruncate, SupportsStreamingUpdateAsAppend {
  private final LogicalWriteInfo info;
  private final SinkMetrics metrics;

  /**
   * @param info Spark's description of the write: its options, the query's id and columns
   * @param metrics where the write counts what it wrote
   */
  public KafkaWriteBuilder(LogicalWriteInfo info, SinkMetrics metrics) {
    this.info = info;
    this.metrics = metrics;
  }

  @Override
  public WriteBuilder truncate() {
    return this;
  }

  @Override
  public Write build() {
    SinkOptions options = SinkOptions.parse(info.options().asCaseSensitiveMap());
    return new Write() {
      @Override
      public String description() {
        return "floodgate_kafka(" + options.topic + ")";
      }

      @Override
      public StreamingWrite toStreaming() {
        return new KafkaStreamingWrite(options, info.schema(), info.queryId(), metrics);
      }
    };
  }
}
