package io.floodgate.spark.write;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * What the committed micro-batches of an at-least-once query wrote, so that its replays can be
 * counted: {@code <checkpoint>/floodgate/output/<batch>}, written by the driver once every task of
 * the batch committed and before Spark's commit log, as one JSON object: {@code {"written": <n>,
 * "ends": {"<partition>": <offset>}}}, where {@code written} is the tuples of the batches up to
 * this one as they were committed (a batch run again counts its last run only), and {@code ends}
 * the offset after the last of them in each output partition.
 *
 * <p>Why: an at-least-once sink writes a batch that Spark runs again (after a crash, a hold or a
 * retried task) once per run, and nothing in the output tells the runs apart. Below {@code ends} of
 * the last batch in Spark's commit log the output holds {@code sum(ends)} tuples, of which {@code
 * written} are the committed runs': the rest are the replays' duplicates. Above it are the tuples
 * of a batch not yet committed (running, or cut short and to be run again). The audit reads it
 * ({@code pipeline.queues.replays}). A query's output topic is its own from its first batch (the
 * offsets count from the topic's creation, as the input side's ledger does).
 */
final class OutputLog {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** One batch's entry: the committed tuples up to it, and where they end per partition. */
  record Entry(long batch, long written, Map<Integer, Long> ends) {

    /** The entry of {@code batch} that follows this one, its tasks' commits given. */
    Entry then(long batch, TaskCommit[] commits) {
      long total = written;
      Map<Integer, Long> merged = new TreeMap<>(ends);
      for (TaskCommit task : commits) {
        total += task.written();
        task.ends().forEach((p, end) -> merged.merge(p, end, Math::max));
      }
      return new Entry(batch, total, Map.copyOf(merged));
    }

    String toJson() {
      ObjectNode node = JSON.createObjectNode();
      node.put("written", written);
      ObjectNode out = node.putObject("ends");
      new TreeMap<>(ends).forEach((p, end) -> out.put(Integer.toString(p), end));
      return node.toString();
    }

    static Entry parse(long batch, String text) throws IOException {
      JsonNode node = JSON.readTree(text);
      if (node == null || !node.path("written").canConvertToLong()) {
        throw new IOException("output log entry " + batch + " is not {\"written\": n, ...}");
      }
      Map<Integer, Long> ends = new TreeMap<>();
      for (Iterator<Map.Entry<String, JsonNode>> it = node.path("ends").fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> p = it.next();
        ends.put(Integer.parseInt(p.getKey()), p.getValue().asLong());
      }
      return new Entry(batch, node.get("written").asLong(), Map.copyOf(ends));
    }
  }

  /**
   * Entries kept behind the newest, as Spark keeps its logs ({@code
   * spark.sql.streaming.minBatchesToRetain}, 100 by default): each batch's write deletes the entry
   * this many batches before it.
   */
  static final int RETAINED = 100;

  /** Before the query's first batch: nothing written. */
  static final Entry EMPTY = new Entry(-1, 0, Map.of());

  private final Path folder;
  private final Configuration conf;
  private Entry last;

  /**
   * @param checkpoint the query's checkpoint location (any Hadoop path)
   * @param conf the Hadoop configuration that resolves it
   */
  OutputLog(String checkpoint, Configuration conf) {
    this.folder = new Path(checkpoint.replaceAll("/+$", "") + "/floodgate/output");
    this.conf = conf;
  }

  /**
   * Write batch {@code batch}'s entry: the entry before it (the last batch below it, read once per
   * driver) plus its tasks' {@code commits}. A batch run again overwrites its entry.
   *
   * @return the entry written
   * @throws IOException the folder cannot be read or the entry written
   */
  Entry record(long batch, TaskCommit[] commits) throws IOException {
    Entry before = last != null && last.batch() == batch - 1 ? last : before(batch);
    Entry entry = before.then(batch, commits);
    FileSystem fs = folder.getFileSystem(conf);
    fs.mkdirs(folder);
    Path tmp = new Path(folder, "." + batch + ".tmp");
    try (OutputStream out = fs.create(tmp, true)) {
      out.write(entry.toJson().getBytes(StandardCharsets.UTF_8));
    }
    Path path = new Path(folder, Long.toString(batch));
    fs.delete(path, false);
    if (!fs.rename(tmp, path)) {
      throw new IOException("cannot rename " + tmp + " to " + path);
    }
    fs.delete(new Path(folder, Long.toString(batch - RETAINED)), false);
    last = entry;
    return entry;
  }

  /** The entry of the last batch below {@code batch}, or {@link #EMPTY}. */
  Entry before(long batch) throws IOException {
    FileSystem fs = folder.getFileSystem(conf);
    if (!fs.exists(folder)) {
      return EMPTY;
    }
    long found = -1;
    for (FileStatus status : fs.listStatus(folder)) {
      String name = status.getPath().getName();
      if (name.chars().allMatch(Character::isDigit) && !name.isEmpty()) {
        long b = Long.parseLong(name);
        if (b < batch && b > found) {
          found = b;
        }
      }
    }
    if (found < 0) {
      return EMPTY;
    }
    try (InputStream in = fs.open(new Path(folder, Long.toString(found)))) {
      return Entry.parse(found, new String(in.readAllBytes(), StandardCharsets.UTF_8));
    }
  }
}
