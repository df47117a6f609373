package io.floodgate.spark.read;

import io.floodgate.spark.swept.SweepCatalogReader;
import io.floodgate.spark.swept.SweptRanges;
import io.floodgate.spark.swept.SweptRecords;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.common.TopicPartition;

/**
 * A task's reads of swept BLOBs ({@code sweepCatalog}): the records of a range below the broker's
 * log start, read from the BLOB chain ({@link SweptRanges}) as the Python reader of swept BLOBs
 * reads them ({@code pipeline.swept.reading.read_partition}), one chain open at a time, and how
 * many records came from BLOBs ({@code sweptRead}, {@link TaskMetrics#SWEPT_READ}).
 */
final class SweptReads {
  private final String catalog;
  private final Configuration hadoopConf;

  /** The catalog's BLOB chains, opened at the first read. */
  private SweptRanges swept;

  /** The chain being read; {@code null}: none. */
  private SweptRecords current;

  /** Records read from chains already ended. */
  private long ended;

  SweptReads(String catalog, Configuration hadoopConf) {
    this.catalog = catalog;
    this.hadoopConf = hadoopConf;
  }

  /**
   * The records of {@code [from, min(until, low))} of {@code tp}, from the BLOB chain; the chain
   * read before ends.
   *
   * @param low the broker's log start offset
   * @return the records, and where to read the broker from ({@link SweptRecords#brokerFrom})
   * @throws io.floodgate.spark.swept.DataLossException {@code from} is in no BLOB
   */
  SweptRecords read(TopicPartition tp, long from, long until, long low) {
    if (swept == null) {
      swept = new SweptRanges(new SweepCatalogReader(catalog), hadoopConf);
    }
    end();
    current = swept.read(tp.topic(), tp.partition(), from, until, low);
    return current;
  }

  /** Whether a chain is being read. */
  boolean reading() {
    return current != null;
  }

  /** End the chain being read, if any, counting its records. */
  void end() {
    if (current != null) {
      ended += current.count();
      current.close();
      current = null;
    }
  }

  /** Records read from BLOBs so far. */
  long count() {
    return ended + (current == null ? 0 : current.count());
  }
}
