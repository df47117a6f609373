package io.floodgate.spark.swept;

import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;

/**
 * Reads swept offsets of a partition back in Kafka order (unsweep), from the BLOB chain the sweep
 * catalog records (as the Python reader of swept BLOBs does, {@code BlobReader.read} and {@code
 * read_swept} of {@code pipeline.swept.reading}). The broker takes over where the chain stops.
 */
public final class SweptRanges {
  private final SweepCatalogReader catalog;
  private final Configuration hadoopConf;

  /**
   * BLOBs on a local file system only ({@link #SweptRanges(SweepCatalogReader, Configuration)}).
   *
   * @param catalog the sweep catalog
   */
  public SweptRanges(SweepCatalogReader catalog) {
    this(catalog, null);
  }

  /**
   * @param catalog the sweep catalog
   * @param hadoopConf what BLOBs on object storage are read with ({@link ObjectBlobs}: the
   *     session's Hadoop configuration); {@code null}: none, an object URL fails its read
   */
  public SweptRanges(SweepCatalogReader catalog, Configuration hadoopConf) {
    this.catalog = catalog;
    this.hadoopConf = hadoopConf;
  }

  /**
   * The swept records of {@code [start, min(end, logStart))}: from {@code start} on while the chain
   * is contiguous.
   *
   * @param topic the topic
   * @param partition the partition
   * @param start first offset wanted; below the broker's log start
   * @param end offset after the range
   * @param logStart the broker's log start offset (low watermark): offsets from it on are the
   *     broker's to give
   * @return the records, read lazily one file at a time, and the offset after them
   * @throws DataLossException {@code start} is in no BLOB (nor, as {@code start < logStart}, in the
   *     broker): "offset S is neither in the broker (log start L) nor in any BLOB of the sweep
   *     catalog"
   * @throws IllegalStateException the catalog cannot be read
   */
  public SweptRecords read(String topic, int partition, long start, long end, long logStart) {
    long upTo = Math.min(end, logStart);
    List<BlobRow> chain = new ArrayList<>();
    long position = start;
    for (BlobRow blob : catalog.covering(topic, partition, start, upTo)) {
      if (blob.startOffset() > position) {
        break; // a gap: the broker holds the rest, or nothing does
      }
      chain.add(blob);
      position = Math.min(upTo, blob.endOffset());
      if (position >= upTo) {
        break;
      }
    }
    if (chain.isEmpty()) {
      throw new DataLossException(
          "offset "
              + start
              + " is neither in the broker (log start "
              + logStart
              + ") nor in any BLOB of the sweep catalog",
          topic,
          partition,
          start,
          end,
          logStart);
    }
    return new SweptRecords(chain, start, upTo, position, hadoopConf);
  }
}
