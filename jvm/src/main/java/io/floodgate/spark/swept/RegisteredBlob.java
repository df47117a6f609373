package io.floodgate.spark.swept;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.file.DataFileReader;
import org.apache.avro.file.SeekableInput;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The records of a registered BLOB, batch by batch in offset order, checked against its catalog row
 * (as the Python reader of swept BLOBs checks it, {@code
 * pipeline.swept.registered.read_registered}), so a damaged BLOB is never read as if it were whole.
 *
 * <p>Before the file is opened: its path is inside the catalog's BLOB directory ({@link
 * BlobPaths#check}) and it is a regular file, not a symbolic link (an object, not a prefix, on
 * object storage: {@link ObjectBlobs}). Before any record is returned: the file's size and SHA-256
 * are the catalog's (the bytes hashed are the bytes then parsed: one open channel or object stream,
 * read twice). While reading: offsets strictly increase inside {@code [startOffset, endOffset)},
 * the first is {@code firstOffset}. At the end: the last is {@code lastOffset} and the count is
 * {@code tuples}. A row without a seal (registered before checksums) gets every check but the
 * digest and the first and last offsets, with an {@code FG-BLOB-001} warning once per BLOB.
 *
 * <p>A failed check throws {@link BlobIntegrityException} (logged {@code FG-BLOB-002}) from the
 * constructor or from {@link #hasNext}/{@link #next}, and again from every later call; batches
 * returned before an {@code offset} error are inside the range and in order. The file is closed at
 * its end, on the first error, or by {@link #close}.
 */
public final class RegisteredBlob
    implements Iterator<List<ConsumerRecord<byte[], byte[]>>>, Closeable {
  private static final Logger LOG = LoggerFactory.getLogger(RegisteredBlob.class);

  /** Unsealed BLOBs (path and id) this JVM has warned about. */
  private static final Set<String> UNSEALED_LOGGED = ConcurrentHashMap.newKeySet();

  private final BlobRow blob;
  private final SeekableInput input;
  private final DataFileReader<GenericRecord> reader;
  private GenericRecord reuse;
  private List<ConsumerRecord<byte[], byte[]>> pending;
  private long count;
  private long previous;
  private boolean done;
  private BlobIntegrityException failure;

  /**
   * A BLOB on a local file system ({@link #RegisteredBlob(BlobRow, Configuration)} with no Hadoop
   * configuration: an object URL throws {@link IllegalStateException}).
   */
  public RegisteredBlob(BlobRow blob) {
    this(blob, null);
  }

  /**
   * Opens and checks the file; nothing is decoded yet.
   *
   * @param blob the catalog row: a local path, or an object URL ({@link ObjectBlobs})
   * @param hadoopConf what an object URL is read with (the session's Hadoop configuration, {@code
   *     spark.hadoop.fs.s3a.*}); unused for a local path
   * @throws BlobPathException the path is outside the BLOB directory or not a regular file
   * @throws BlobIntegrityException the file is missing, its size or SHA-256 differs, or it is not
   *     an Avro container of {@link BlobFormat#RECORD_NAME} records
   * @throws IllegalStateException an object URL with no {@code hadoopConf}, or no s3a connector on
   *     the classpath
   */
  public RegisteredBlob(BlobRow blob, Configuration hadoopConf) {
    this.blob = blob;
    this.previous = blob.startOffset() - 1;
    this.input = openChecked(blob, hadoopConf);
    try {
      this.reader = new DataFileReader<>(input, new GenericDatumReader<>(null, BlobFormat.SCHEMA));
      String name = reader.getSchema().getFullName();
      if (!BlobFormat.RECORD_NAME.equals(name)) {
        throw damaged(
            "unreadable",
            "an Avro file of '" + name + "' records, not " + BlobFormat.RECORD_NAME,
            null);
      }
    } catch (BlobIntegrityException e) {
      closeQuietly();
      throw e;
    } catch (IOException | RuntimeException e) {
      closeQuietly();
      throw damaged("unreadable", e.getClass().getSimpleName() + ": " + e.getMessage(), null);
    }
  }

  @Override
  public boolean hasNext() {
    if (failure != null) {
      throw failure;
    }
    if (pending == null && !done) {
      try {
        pending = advance();
      } catch (BlobIntegrityException e) {
        failure = e;
        closeQuietly();
        throw e;
      }
    }
    return pending != null;
  }

  @Override
  public List<ConsumerRecord<byte[], byte[]>> next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    List<ConsumerRecord<byte[], byte[]>> out = pending;
    pending = null;
    return out;
  }

  @Override
  public void close() {
    closeQuietly();
  }

  /** The next non-empty batch, or {@code null} at the end (after the end-of-file checks). */
  private List<ConsumerRecord<byte[], byte[]>> advance() {
    try {
      while (reader.hasNext()) {
        reuse = reader.next(reuse);
        long[] offsets = BlobFormat.offsets(reuse);
        if (offsets.length == 0) {
          continue;
        }
        long first = offsets[0];
        if (count == 0 && blob.firstOffset() != null && first != blob.firstOffset()) {
          throw damaged(
              "offset",
              "its first offset is " + first + ", the catalog's " + blob.firstOffset(),
              first);
        }
        long before = previous;
        for (long offset : offsets) {
          if (offset <= before || offset >= blob.endOffset()) {
            throw damaged(
                "offset",
                "offset "
                    + offset
                    + " after "
                    + before
                    + " is not strictly increasing inside ["
                    + blob.startOffset()
                    + ", "
                    + blob.endOffset()
                    + ")",
                offset);
          }
          before = offset;
        }
        previous = before;
        List<ConsumerRecord<byte[], byte[]>> batch =
            BlobFormat.records(reuse, offsets, blob.topic(), blob.partition());
        count += batch.size();
        return batch;
      }
    } catch (BlobIntegrityException e) {
      throw e;
    } catch (IOException | RuntimeException e) {
      throw damaged("unreadable", e.getClass().getSimpleName() + ": " + e.getMessage(), null);
    }
    done = true;
    closeQuietly();
    if (count != blob.tuples()) {
      throw damaged("count", "it holds " + count + " records, the catalog " + blob.tuples(), null);
    }
    Long last = count > 0 ? previous : null;
    if (blob.sha256() != null && !Objects.equals(last, blob.lastOffset())) {
      throw damaged(
          "offset", "its last offset is " + last + ", the catalog's " + blob.lastOffset(), last);
    }
    return null;
  }

  /**
   * The BLOB, open at its start, inside the directory, a regular file (an object, not a prefix),
   * its size and seal checked.
   */
  private static SeekableInput openChecked(BlobRow blob, Configuration hadoopConf) {
    try {
      BlobPaths.check(blob);
    } catch (BlobPathException e) {
      LOG.error("FG-BLOB-002 {}", e.getMessage());
      throw e;
    }
    SeekableInput input =
        ObjectBlobs.isObjectUrl(blob.path()) ? openObject(blob, hadoopConf) : openFile(blob);
    try {
      long size = input.length();
      if (size != blob.bytes()) {
        throw damaged(
            blob, "size", "the file holds " + size + " bytes, the catalog " + blob.bytes(), null);
      }
      if (blob.sha256() == null) {
        if (UNSEALED_LOGGED.add(blob.path() + "\0" + blob.id())) {
          LOG.warn(
              "FG-BLOB-001 BLOB {} ({}) of {}[{}] has no SHA-256 in the catalog (registered before"
                  + " checksums): read with the size, offset and count checks only",
              blob.id(),
              blob.path(),
              blob.topic(),
              blob.partition());
        }
      } else {
        String digest = sha256(input);
        if (!digest.equals(blob.sha256())) {
          throw damaged(
              blob,
              "sha256",
              "the file's SHA-256 is " + digest + ", the catalog's " + blob.sha256(),
              null);
        }
        input.seek(0);
      }
      return input;
    } catch (IOException e) {
      closeQuietly(input);
      throw damaged(blob, "unreadable", exceptionText(e), null);
    } catch (RuntimeException e) {
      closeQuietly(input);
      throw e;
    }
  }

  /** A local file, opened without following a link. */
  private static SeekableInput openFile(BlobRow blob) {
    Path path = Paths.get(blob.path());
    BasicFileAttributes attributes;
    try {
      attributes = Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    } catch (IOException e) {
      throw damaged(blob, "missing", exceptionText(e), null);
    }
    if (attributes.isSymbolicLink()) {
      throw refused(blob, "it is a symbolic link: never followed");
    }
    if (!attributes.isRegularFile()) {
      // Checked before opening: opening a FIFO would wait for a writer.
      throw refused(
          blob, "it is not a regular file (mode " + BlobPaths.fileMode(path) + "): not read");
    }
    try {
      return new ChannelInput(
          FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS));
    } catch (IOException e) {
      throw damaged(blob, "missing", exceptionText(e), null);
    }
  }

  /**
   * An object through Hadoop's s3a connector ({@link ObjectBlobs}).
   *
   * @throws IllegalStateException no {@code hadoopConf}, or s3a is not on the classpath or does not
   *     start ({@link ObjectBlobs#fileSystem})
   */
  private static SeekableInput openObject(BlobRow blob, Configuration hadoopConf) {
    if (hadoopConf == null) {
      throw new IllegalStateException(
          "BLOB " + blob.id() + " (" + blob.path() + ") is an object: read with no Hadoop conf");
    }
    org.apache.hadoop.fs.Path path = ObjectBlobs.hadoopPath(blob.path());
    FileSystem fs = ObjectBlobs.fileSystem(path, hadoopConf);
    FileStatus status;
    try {
      status = fs.getFileStatus(path);
    } catch (IOException e) {
      throw damaged(blob, "missing", exceptionText(e), null);
    }
    if (!status.isFile()) {
      throw refused(blob, "it is a prefix of objects (a directory), not an object: not read");
    }
    try {
      return ObjectBlobs.open(fs, status);
    } catch (IOException e) {
      throw damaged(blob, "missing", exceptionText(e), null);
    }
  }

  /** SHA-256 of a file from its start, 64 lowercase hex digits. */
  static String sha256(FileChannel channel) throws IOException {
    return sha256(new ChannelInput(channel));
  }

  /** SHA-256 of an input from its start, 64 lowercase hex digits; it is left at its end. */
  static String sha256(SeekableInput input) throws IOException {
    MessageDigest digest;
    try {
      digest = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("this JVM has no SHA-256", e);
    }
    byte[] buffer = new byte[1 << 20];
    input.seek(0);
    int n;
    while ((n = input.read(buffer, 0, buffer.length)) >= 0) {
      digest.update(buffer, 0, n);
    }
    return HexFormat.of().formatHex(digest.digest());
  }

  private static String exceptionText(IOException e) {
    return e.getClass().getSimpleName() + ": " + e.getMessage();
  }

  private BlobIntegrityException damaged(String reason, String message, Long offset) {
    return damaged(blob, reason, message, offset);
  }

  private static BlobIntegrityException damaged(
      BlobRow blob, String reason, String message, Long offset) {
    BlobIntegrityException error = new BlobIntegrityException(message, blob, reason, offset);
    LOG.error("FG-BLOB-002 {}", error.getMessage());
    return error;
  }

  private static BlobPathException refused(BlobRow blob, String message) {
    BlobPathException error = new BlobPathException(message, blob, blob.blobDir(), "not-a-file");
    LOG.error("FG-BLOB-002 {}", error.getMessage());
    return error;
  }

  private void closeQuietly() {
    closeQuietly(input);
  }

  private static void closeQuietly(SeekableInput input) {
    try {
      input.close();
    } catch (IOException e) {
      // Read only: nothing to lose.
    }
  }

  /** Avro's {@link SeekableInput} over an open channel (the one that was hashed). */
  private static final class ChannelInput implements SeekableInput {
    private final FileChannel channel;

    ChannelInput(FileChannel channel) {
      this.channel = channel;
    }

    @Override
    public void seek(long position) throws IOException {
      channel.position(position);
    }

    @Override
    public long tell() throws IOException {
      return channel.position();
    }

    @Override
    public long length() throws IOException {
      return channel.size();
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      return channel.read(ByteBuffer.wrap(b, off, len));
    }

    @Override
    public void close() throws IOException {
      channel.close();
    }
  }
}
