package io.floodgate.spark.offsets;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import java.util.SortedMap;
import java.util.UUID;
import java.util.function.Supplier;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.common.TopicPartition;

/**
 * The first offsets of a streaming query, kept in its checkpoint so that a restart plans
 * micro-batch 0 from the same offsets: Spark's {@code KafkaSourceInitialOffsetWriter} (an {@code
 * HDFSMetadataLog} under the source's checkpoint location, {@code <checkpoint>/sources/<n>}), file
 * for file.
 *
 * <p>Spark writes {@code offsets/0} before it runs micro-batch 0 and {@code commits/0} after; a
 * driver that dies in between re-runs batch 0 on restart and asks the source for its {@code
 * initialOffset()} again. Planned from the broker a second time, {@code latest} (or {@code
 * earliest}, after retention) would be another offset, and tuples read twice or lost. So the first
 * answer is written here and every later one read back.
 *
 * <p>The file is {@code <checkpointLocation>/0}: a zero byte (Spark 2.1's, SPARK-19517), {@code
 * v1}, a newline, then the offsets' JSON ({@link PartitionOffsets}; Spark's Kafka source parses
 * it). It is written whole or not at all (a temporary file renamed), as {@code HDFSMetadataLog}
 * writes. A checkpoint without it (a new query, or one an older Floodgate started) gets it on the
 * first call, from {@code startingOffsets}, as Spark's source does when its log is empty.
 */
public final class InitialOffsetLog {
  /** The version this class writes and the highest it reads (Spark's {@code VERSION}). */
  static final int VERSION = 1;

  private final Path file;
  private final Configuration hadoopConf;

  /**
   * @param checkpointLocation the source's checkpoint directory Spark gives {@code
   *     toMicroBatchStream} (any Hadoop file system)
   * @param hadoopConf what the file system is opened with (the session's)
   */
  public InitialOffsetLog(String checkpointLocation, Configuration hadoopConf) {
    this.file = new Path(checkpointLocation, "0");
    this.hadoopConf = hadoopConf;
  }

  /** The file written ({@code <checkpointLocation>/0}). */
  public Path file() {
    return file;
  }

  /**
   * The offsets written, or empty when there is no file yet.
   *
   * @throws IllegalStateException the file is not one this class wrote (naming it and why)
   * @throws UncheckedIOException it could not be read
   */
  public Optional<SortedMap<TopicPartition, Long>> read() {
    try {
      FileSystem fs = file.getFileSystem(hadoopConf);
      byte[] bytes;
      try (InputStream in = fs.open(file)) {
        bytes = in.readAllBytes();
      } catch (FileNotFoundException e) {
        return Optional.empty();
      }
      return Optional.of(parse(bytes));
    } catch (IOException e) {
      throw new UncheckedIOException("reading the first offsets from " + file, e);
    }
  }

  /**
   * The offsets written, or those of {@code planned} written now and returned.
   *
   * <p>Should two writers race (a query started twice on one checkpoint, which Spark refuses), the
   * file that won is read back, as {@code HDFSMetadataLog.add} returns {@code false}.
   *
   * @param planned the first offsets from {@code startingOffsets}, asked only when there is no file
   * @throws UncheckedIOException the file could not be read or written
   */
  public SortedMap<TopicPartition, Long> getOrCreate(
      Supplier<SortedMap<TopicPartition, Long>> planned) {
    Optional<SortedMap<TopicPartition, Long>> written = read();
    if (written.isPresent()) {
      return written.get();
    }
    SortedMap<TopicPartition, Long> offsets = planned.get();
    try {
      FileSystem fs = file.getFileSystem(hadoopConf);
      fs.mkdirs(file.getParent());
      Path temporary = new Path(file.getParent(), "." + file.getName() + "." + UUID.randomUUID());
      try (OutputStream out = fs.create(temporary, false)) {
        out.write(format(offsets));
      }
      if (!fs.rename(temporary, file)) {
        fs.delete(temporary, false);
        return read()
            .orElseThrow(
                () -> new UncheckedIOException(new IOException("could not rename into " + file)));
      }
    } catch (IOException e) {
      throw new UncheckedIOException("writing the first offsets to " + file, e);
    }
    return offsets;
  }

  /** The file's bytes for {@code offsets}. */
  static byte[] format(SortedMap<TopicPartition, Long> offsets) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0);
    byte[] text =
        ("v" + VERSION + "\n" + PartitionOffsets.toJson(offsets)).getBytes(StandardCharsets.UTF_8);
    out.write(text, 0, text.length);
    return out.toByteArray();
  }

  /**
   * The offsets of a file's bytes: Spark's {@code KafkaSourceInitialOffsetWriter.deserialize}, a
   * version line or (Spark 2.1's) none.
   */
  private SortedMap<TopicPartition, Long> parse(byte[] bytes) {
    String content = new String(bytes, StandardCharsets.UTF_8);
    if (!content.isEmpty() && content.charAt(0) == 0) {
      content = content.substring(1);
    }
    if (content.isEmpty()) {
      throw malformed("it is empty");
    }
    String json = content;
    if (content.charAt(0) == 'v') {
      int newline = content.indexOf('\n');
      if (newline < 0) {
        throw malformed("no version line");
      }
      String version = content.substring(1, newline).strip();
      int number;
      try {
        number = Integer.parseInt(version);
      } catch (NumberFormatException e) {
        throw malformed("version line 'v" + version + "'");
      }
      if (number < 1 || number > VERSION) {
        throw malformed(
            "version v"
                + number
                + ", this source reads v1 to v"
                + VERSION
                + " (a newer Floodgate or Spark wrote it)");
      }
      json = content.substring(newline + 1);
    }
    try {
      return PartitionOffsets.fromJson(json);
    } catch (IllegalArgumentException e) {
      throw malformed(e.getMessage());
    }
  }

  private IllegalStateException malformed(String why) {
    return new IllegalStateException(
        "the first offsets file " + file + " of the checkpoint cannot be read: " + why);
  }
}
