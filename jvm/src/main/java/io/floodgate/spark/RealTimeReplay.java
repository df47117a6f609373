package io.floodgate.spark;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.RealTimeEndLog;
import java.util.Map;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A real-time batch that runs again after a crash reads to where its first run stopped, as its
 * tasks logged it ({@link RealTimeEndLog}, option {@code realTimeEndsGroup}): the same input, so
 * that the write tasks after a shuffle that committed in the first run may skip it.
 *
 * <p>Spark runs again only the batch a query was in when it stopped (its offset log has the batch,
 * its commit log not), which is the first batch the query's source plans when it starts.
 */
final class RealTimeReplay {
  private static final Logger LOG = LoggerFactory.getLogger(RealTimeReplay.class);

  private final SourceOptions options;

  /** The first real-time batch the source planned, and where its first run stopped. */
  private Long firstBatch;

  private Map<TopicPartition, Long> firstBatchEnds = Map.of();

  RealTimeReplay(SourceOptions options) {
    this.options = options;
  }

  /**
   * With {@code realTimeEndsGroup}: where the batch planned now stopped in its first run, if it ran
   * before ({@link RealTimeEndLog}), so that it reads the same input again. The log is read for the
   * first batch this source plans (a query starts, or starts again after a crash), and kept for
   * that batch (Spark may plan it more than once); a later batch runs once while the query runs.
   */
  Map<TopicPartition, Long> firstRunEnds() {
    if (options.realTimeEndsGroup == null) {
      return Map.of();
    }
    SparkContext context = SparkSession.active().sparkContext();
    String queryId = context.getLocalProperty(RealTimeEndLog.QUERY_ID);
    String batch = context.getLocalProperty(RealTimeEndLog.BATCH_ID);
    if (queryId == null || batch == null) {
      throw new IllegalStateException(
          "source "
              + options.stream
              + ": realTimeEndsGroup is set, and the batch is planned outside a streaming query");
    }
    long id = Long.parseLong(batch);
    if (firstBatch == null) {
      firstBatch = id;
      firstBatchEnds = RealTimeEndLog.logged(options, queryId, id);
      if (!firstBatchEnds.isEmpty()) {
        LOG.info(
            "source {}: real-time batch {} runs again, to where its first run stopped: {}",
            options.stream,
            id,
            firstBatchEnds);
      }
    }
    return firstBatch == id ? firstBatchEnds : Map.of();
  }
}
