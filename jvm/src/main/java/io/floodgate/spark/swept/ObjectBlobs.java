package io.floodgate.spark.swept;

import java.io.IOException;
import java.util.Arrays;
import org.apache.avro.file.SeekableInput;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.hadoop.util.functional.FutureIO;

/**
 * Swept BLOBs on object storage: a catalog whose {@code blob_dir} is a URL {@code
 * s3://bucket/prefix} names each BLOB {@code s3://bucket/prefix/<name>.avro} (docs/formats.md,
 * "Swept BLOBs"). They are read through Hadoop's FileSystem API with its {@code s3a} connector
 * (hadoop-aws, on the session's classpath; docs/spark-cluster.md), {@code s3://} taken as {@code
 * s3a://} as Spark users write it, configured by the session's Hadoop configuration ({@code
 * spark.hadoop.fs.s3a.*}: endpoint, path-style access, credentials).
 *
 * <p>An object store has no symbolic links nor {@code ..} to resolve, but Hadoop's {@link Path}
 * normalizes {@code ..} away ({@code s3a://b/p/../q} is {@code s3a://b/q}), so the path check is
 * textual ({@link #inside}).
 */
public final class ObjectBlobs {
  /** The URL schemes read through s3a ({@code s3} is mapped to {@code s3a}). */
  private static final String[] SCHEMES = {"s3://", "s3a://"};

  /** The read policy of an open BLOB (Hadoop's {@code openFile()} option): read once, in order. */
  static final String READ_POLICY = "whole-file, sequential";

  private ObjectBlobs() {}

  /** Whether {@code path} is an object URL ({@code s3://} or {@code s3a://}), not a local path. */
  public static boolean isObjectUrl(String path) {
    return path != null && Arrays.stream(SCHEMES).anyMatch(path::startsWith);
  }

  /**
   * Whether the object {@code path} is exactly {@code <blobDir>/<name>} as written ({@code
   * pipeline.swept.registered.inside} for object URLs): {@code blobDir} (a trailing {@code /}
   * ignored) then one segment, not empty, {@code .} nor {@code ..}; besides, no empty, {@code .} or
   * {@code ..} segment anywhere (Hadoop's {@link Path} would normalize them away), nor a query or
   * fragment. The scheme is part of the text: an {@code s3a://} path is not inside an {@code s3://}
   * directory. Nothing is resolved or asked of the store.
   */
  public static boolean inside(String path, String blobDir) {
    if (!isObjectUrl(path) || !isObjectUrl(blobDir)) {
      return false;
    }
    String base = blobDir;
    while (base.endsWith("/")) {
      base = base.substring(0, base.length() - 1);
    }
    if (!path.startsWith(base + "/") || path.contains("?") || path.contains("#")) {
      return false;
    }
    if (path.substring(base.length() + 1).contains("/")) {
      return false;
    }
    for (String segment : withoutScheme(path).split("/", -1)) {
      if (segment.isEmpty() || segment.equals(".") || segment.equals("..")) {
        return false;
      }
    }
    return true;
  }

  /** {@code s3://bucket/key} as {@code s3a://bucket/key}; an {@code s3a://} URL as it is. */
  public static Path hadoopPath(String url) {
    return new Path("s3a://" + withoutScheme(url));
  }

  /**
   * The file system of {@code path} (Hadoop's cache: one per bucket and user).
   *
   * @throws IllegalStateException the s3a connector is not on the classpath (the message says how
   *     to add it), or it does not start (its configuration): not a damaged BLOB
   */
  static FileSystem fileSystem(Path path, Configuration conf) {
    try {
      return path.getFileSystem(conf);
    } catch (UnsupportedFileSystemException e) {
      throw noConnector(path, e);
    } catch (IOException e) {
      throw new IllegalStateException(
          "swept BLOB " + path + " is on object storage, and s3a does not start: " + e, e);
    } catch (RuntimeException e) {
      // Hadoop's core-default.xml names fs.s3a.impl: without hadoop-aws, its class is not found.
      if (e.getCause() instanceof ClassNotFoundException) {
        throw noConnector(path, e);
      }
      throw e;
    }
  }

  private static IllegalStateException noConnector(Path path, Exception e) {
    return new IllegalStateException(
        "swept BLOB "
            + path
            + " is on object storage, and this JVM has no s3a connector ("
            + e.getMessage()
            + "): add hadoop-aws of the session's Hadoop version and the AWS SDK to the session"
            + " (spark.jars.packages org.apache.hadoop:hadoop-aws:<version>, or the jars"
            + " scripts/s3a-jars resolves; docs/spark-cluster.md)",
        e);
  }

  /**
   * Opens the object {@code status} names for a whole, sequential read (Hadoop's {@code openFile()}
   * with the status, so s3a asks no second HEAD and reads the version it describes). s3a's change
   * detection ({@code fs.s3a.change.detection.mode}, default {@code server} on the ETag) fails a
   * later read of an object replaced meanwhile: the bytes hashed and then parsed are the ones whose
   * size was checked.
   */
  static SeekableInput open(FileSystem fs, FileStatus status) throws IOException {
    FSDataInputStream in =
        FutureIO.awaitFuture(
            fs.openFile(status.getPath())
                .withFileStatus(status)
                .opt("fs.option.openfile.read.policy", READ_POLICY)
                .build());
    return new StreamInput(in, status.getLen());
  }

  private static String withoutScheme(String url) {
    return url.substring(url.indexOf("://") + 3);
  }

  /** Avro's {@link SeekableInput} over an open object, its length from the status. */
  private static final class StreamInput implements SeekableInput {
    private final FSDataInputStream in;
    private final long length;

    StreamInput(FSDataInputStream in, long length) {
      this.in = in;
      this.length = length;
    }

    @Override
    public void seek(long position) throws IOException {
      in.seek(position);
    }

    @Override
    public long tell() throws IOException {
      return in.getPos();
    }

    @Override
    public long length() {
      return length;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      return in.read(b, off, len);
    }

    @Override
    public void close() throws IOException {
      in.close();
    }
  }
}
