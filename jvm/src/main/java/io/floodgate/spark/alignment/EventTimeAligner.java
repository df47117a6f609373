package io.floodgate.spark.alignment;

import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Caps a micro-batch's end so that no partition is read more than {@code maxEventTimeDriftMs} past
 * the least planned event time (option {@code maxEventTimeDriftMs}), as the Python source's {@code
 * pipeline.spark.alignment.align_batch_end}.
 */
public interface EventTimeAligner extends AutoCloseable {
  /**
   * {@code end} capped in event time.
   *
   * @param begin the batch's start per partition
   * @param end the batch's end before alignment
   * @param latest the high watermarks
   * @param idle partitions that hold nobody back
   * @return the aligned end, {@code begin <= aligned <= end}
   */
  SortedMap<Integer, Long> align(
      Map<Integer, Long> begin,
      Map<Integer, Long> end,
      Map<Integer, Long> latest,
      Set<Integer> idle);

  /** How many partition ends alignment capped so far. */
  long capped();

  @Override
  void close();

  /** No alignment: the end as planned. */
  EventTimeAligner NONE =
      new EventTimeAligner() {
        @Override
        public SortedMap<Integer, Long> align(
            Map<Integer, Long> begin,
            Map<Integer, Long> end,
            Map<Integer, Long> latest,
            Set<Integer> idle) {
          return new TreeMap<>(end);
        }

        @Override
        public long capped() {
          return 0;
        }

        @Override
        public void close() {}
      };
}
