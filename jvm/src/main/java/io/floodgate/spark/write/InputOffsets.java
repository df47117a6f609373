package io.floodgate.spark.write;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * The input offsets of a micro-batch, read from the query's offset log, as the driver commits them
 * to the query's consumer group once the batch's tasks committed.
 *
 * <p>Spark writes {@code <checkpoint>/offsets/<batch>} before the batch runs: a version line, the
 * batch's metadata, then one line per source, the source's end offset. Floodgate's source, as
 * Spark's Kafka source, logs {@code {"<topic>": {"<partition>": <next offset>}}}.
 *
 * <p>Why the consumer group is committed here, outside the tasks' transactions: one transaction
 * cannot span several producers. So the group is committed after the output, and at most one
 * micro-batch behind it: a driver that dies between the tasks' commits and this one leaves the
 * group one batch behind until the replayed batch (whose tasks skip) commits it. That is safe: a
 * restarted query reads from its checkpoint, never from the group, and a group behind makes its
 * input stream queues read longer, never shorter, so back-pressure errs on the careful side.
 */
public final class InputOffsets {
  private static final ObjectMapper JSON = new ObjectMapper();

  private InputOffsets() {}

  /**
   * The end offsets of {@code topics} that micro-batch {@code batch} read.
   *
   * @param checkpoint the query's checkpoint location (any Hadoop path)
   * @param batch the micro-batch
   * @param topics the query's input topics (other sources' offsets are left out)
   * @param conf the Hadoop configuration that resolves the path
   * @throws IOException the log cannot be read, or Spark has not logged the batch
   */
  public static Map<TopicPartition, OffsetAndMetadata> of(
      String checkpoint, long batch, List<String> topics, Configuration conf) throws IOException {
    Path path = new Path(checkpoint.replaceAll("/+$", "") + "/offsets/" + batch);
    FileSystem fs = path.getFileSystem(conf);
    try (FSDataInputStream in = fs.open(path);
        BufferedReader reader =
            new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      return parse(reader.lines().toList(), topics, batch);
    }
  }

  /** The offsets of {@code topics} in an offset log entry's lines. */
  static Map<TopicPartition, OffsetAndMetadata> parse(
      List<String> lines, List<String> topics, long batch) throws IOException {
    Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
    String metadata = "{\"batch\":" + batch + "}";
    for (String line : lines.subList(Math.min(2, lines.size()), lines.size())) {
      if (line.isBlank() || line.equals("-") || !line.startsWith("{")) {
        continue;
      }
      JsonNode source = JSON.readTree(line);
      for (Iterator<Map.Entry<String, JsonNode>> it = source.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> topic = it.next();
        if (!topics.contains(topic.getKey()) || !topic.getValue().isObject()) {
          continue;
        }
        for (Iterator<Map.Entry<String, JsonNode>> ps = topic.getValue().fields(); ps.hasNext(); ) {
          Map.Entry<String, JsonNode> p = ps.next();
          if (p.getValue().canConvertToLong() && p.getValue().asLong() >= 0) {
            offsets.put(
                new TopicPartition(topic.getKey(), Integer.parseInt(p.getKey())),
                new OffsetAndMetadata(p.getValue().asLong(), metadata));
          }
        }
      }
    }
    return offsets;
  }
}
