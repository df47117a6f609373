package io.floodgate.spark.write;

import java.util.Map;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * What a write task tells the driver of its partition of a micro-batch: the tuples it committed, or
 * those it skipped because the partition was committed before ({@link BatchMarker}), and where its
 * tuples ended in the output topic ({@link OutputLog}).
 *
 * @param partition the task's partition
 * @param written tuples committed by this attempt
 * @param skipped tuples skipped as already committed
 * @param sleeps times the task slept on a full output stream queue
 * @param ends per output topic partition, the offset after the last tuple this attempt wrote there
 *     (partitions it wrote nothing to are absent)
 */
public record TaskCommit(
    int partition, long written, long skipped, int sleeps, Map<Integer, Long> ends)
    implements WriterCommitMessage {}
