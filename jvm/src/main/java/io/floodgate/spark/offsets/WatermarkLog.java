package io.floodgate.spark.offsets;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.stream.Stream;
import org.apache.kafka.common.TopicPartition;

/**
 * The watermark Spark applies to late tuples of a micro-batch, read from a local checkpoint's
 * offset log (docs/formats.md, "Offsets").
 *
 * <p>Spark writes {@code <checkpoint>/offsets/<batch>} before it plans a micro-batch: a version
 * line, the batch's metadata ({@code batchWatermarkMs}), then one offsets line per source. Late
 * tuples are judged by the <em>previous</em> batch's watermark (Spark >= 3.4, {@code
 * PropagateWatermarkSimulator.getInputWatermarkForLateEvents}): 0 for the first batch.
 */
public final class WatermarkLog {
  private static final ObjectMapper JSON = new ObjectMapper();

  private WatermarkLog() {}

  /**
   * {@code [batch id, watermark ms]} of the newest of the last {@code lookBack} logged batches with
   * a source line whose offsets (every topic's) equal {@code end}; {@code null} when none matches.
   *
   * @param checkpoint the query's checkpoint directory (local)
   * @param end the micro-batch's end offset per topic-partition
   */
  public static long[] batchWatermark(
      String checkpoint, Map<TopicPartition, Long> end, int lookBack) {
    SortedMap<TopicPartition, Long> wanted = TopicPartitions.sorted(end);
    Path directory = Path.of(checkpoint, "offsets");
    List<Long> batches = new ArrayList<>();
    try (Stream<Path> files = Files.list(directory)) {
      files
          .map(p -> p.getFileName().toString())
          .filter(n -> !n.isEmpty() && n.chars().allMatch(Character::isDigit))
          .forEach(n -> batches.add(Long.parseLong(n)));
    } catch (IOException e) {
      return null;
    }
    batches.sort(Comparator.reverseOrder());
    for (long batch : batches.subList(0, Math.min(lookBack, batches.size()))) {
      String text = entry(directory, batch);
      if (text == null) {
        continue;
      }
      String[] lines = text.split("\n");
      for (int i = 2; i < lines.length; i++) {
        String line = lines[i].strip();
        if (!line.startsWith("{")) {
          continue;
        }
        try {
          if (PartitionOffsets.fromJson(line).equals(wanted)) {
            String previous = batch > 0 ? entry(directory, batch - 1) : null;
            if (previous == null) {
              return new long[] {batch, 0};
            }
            JsonNode metadata = JSON.readTree(previous.split("\n")[1]);
            JsonNode watermark = metadata.get("batchWatermarkMs");
            return new long[] {batch, watermark == null ? 0 : watermark.asLong()};
          }
        } catch (IOException | IllegalArgumentException e) {
          // not this source's line
        }
      }
    }
    return null;
  }

  /** An entry's text; {@code null} when absent or incomplete (fewer than three lines). */
  static String entry(Path directory, long batch) {
    try {
      String text =
          Files.readString(directory.resolve(Long.toString(batch)), StandardCharsets.UTF_8);
      return text.split("\n").length >= 3 ? text : null;
    } catch (IOException e) {
      return null;
    }
  }
}
