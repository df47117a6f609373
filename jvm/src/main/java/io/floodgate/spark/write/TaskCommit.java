package io.floodgate.spark.write;

import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * What a write task tells the driver of its partition of a micro-batch: the tuples it committed, or
 * those it skipped because the partition was committed before ({@link BatchMarker}).
 *
 * @param partition the task's partition
 * @param written tuples committed by this attempt
 * @param skipped tuples skipped as already committed
 * @param sleeps times the task slept on a full output stream queue
 */
public record TaskCommit(int partition, long written, long skipped, int sleeps)
    implements WriterCommitMessage {}
