package io.floodgate.spark.offsets;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link WatermarkLog#batchWatermark} on offset logs written as Spark writes them. */
class WatermarkLogTest {
  @TempDir Path checkpoint;

  /** One entry of Spark's offset log: version, metadata, one line per source. */
  private void log(long batch, long watermarkMs, String... sources) throws IOException {
    Files.createDirectories(checkpoint.resolve("offsets"));
    List<String> lines = new ArrayList<>();
    lines.add("v1");
    lines.add("{\"batchWatermarkMs\": " + watermarkMs + ", \"batchTimestampMs\": 1}");
    lines.addAll(List.of(sources));
    Files.writeString(
        checkpoint.resolve("offsets").resolve(Long.toString(batch)), String.join("\n", lines));
  }

  private long[] watermark(Map<Integer, Long> end) {
    return WatermarkLog.batchWatermark(
        checkpoint.toString(), TopicPartitions.flatten(Map.of("flights", end)), 8);
  }

  @Test
  void thePreviousEntrysWatermarkForTheEntryWhoseOffsetsEndTheBatch() throws IOException {
    log(0, 0, "{\"flights\":{\"0\":10,\"1\":12}}");
    log(1, 5_000, "{\"other\":{\"0\":3}}", "{\"flights\":{\"0\":20,\"1\":12}}");
    log(2, 9_000, "{\"flights\":{\"0\":30,\"1\":31}}");
    // Spark judges a batch's late tuples by the watermark of the batch before it.
    assertArrayEquals(new long[] {1, 0}, watermark(Map.of(0, 20L, 1, 12L)));
    assertArrayEquals(new long[] {0, 0}, watermark(Map.of(0, 10L, 1, 12L)));
    assertArrayEquals(new long[] {2, 5_000}, watermark(Map.of(0, 30L, 1, 31L)));
    // Not logged (yet), or no checkpoint at all: no lateness check, never a guess.
    assertNull(watermark(Map.of(0, 40L, 1, 31L)));
    assertNull(
        WatermarkLog.batchWatermark(
            checkpoint.resolve("missing").toString(),
            TopicPartitions.flatten(Map.of("flights", Map.of(0, 10L))),
            8));
  }

  @Test
  void aLineOverSeveralTopicsMatchesOnlyEveryTopicsOffsets() throws IOException {
    log(0, 0, "{\"flights\": {\"0\": 10}, \"runways\": {\"0\": 2}}");
    log(1, 4_000, "{\"flights\": {\"0\": 12}, \"runways\": {\"0\": 3}}");
    Map<String, Map<Integer, Long>> both =
        Map.of("flights", Map.of(0, 12L), "runways", Map.of(0, 3L));
    assertArrayEquals(
        new long[] {1, 0},
        WatermarkLog.batchWatermark(checkpoint.toString(), TopicPartitions.flatten(both), 8));
    assertNull(watermark(Map.of(0, 12L))); // one topic's offsets are not the line's
  }

  @Test
  void theFloodgateSourcesSpacedTextMatchesToo() throws IOException {
    log(0, 0, "{\"flights\": {\"0\": 10}}");
    log(1, 7_000, "{\"flights\": {\"0\": 10, \"2\": 4, \"10\": 5}}");
    log(2, 8_000, "{\"flights\": {\"0\": 11, \"2\": 4, \"10\": 5}}");
    assertArrayEquals(new long[] {2, 7_000}, watermark(Map.of(0, 11L, 2, 4L, 10, 5L)));
  }

  @Test
  void onlyTheLastLookBackEntriesAreSearched() throws IOException {
    for (long batch = 0; batch < 10; batch++) {
      log(batch, 1_000 * batch, "{\"flights\":{\"0\":" + (10 * batch) + "}}");
    }
    assertArrayEquals(new long[] {9, 8_000}, watermark(Map.of(0, 90L)));
    assertArrayEquals(new long[] {2, 1_000}, watermark(Map.of(0, 20L))); // the 8th newest
    assertNull(watermark(Map.of(0, 10L))); // the 9th newest
  }

  @Test
  void anIncompleteEntryIsNotLoggedYetAndAMissingWatermarkIsZero() throws IOException {
    Files.createDirectories(checkpoint.resolve("offsets"));
    Files.writeString(
        checkpoint.resolve("offsets").resolve("0"),
        "v1\n{\"batchTimestampMs\":1}\n{\"flights\":{\"0\":5}}");
    Files.writeString(checkpoint.resolve("offsets").resolve("1"), "v1\n{\"batchWatermarkMs\":3}");
    Files.writeString(
        checkpoint.resolve("offsets").resolve("2"), "v1\n{}\n{\"flights\":{\"0\":7}}");
    Files.writeString(checkpoint.resolve("offsets").resolve("notes.txt"), "v1\n{}\n{}");
    assertNull(watermark(Map.of(0, 6L))); // entry 1 has no source line yet
    // Entry 2's previous entry is incomplete: as the first batch, watermark 0.
    assertArrayEquals(new long[] {2, 0}, watermark(Map.of(0, 7L)));
    log(3, 0, "{\"flights\":{\"0\":9}}");
    assertArrayEquals(new long[] {3, 0}, watermark(Map.of(0, 9L))); // no batchWatermarkMs in 2
  }
}
