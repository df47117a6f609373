package io.floodgate.spark.swept;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;

/**
 * BLOBs written here for the checks' tests, as {@code pipeline.swept.blob.write_sealed_blob} writes
 * them (values {@code v<offset>}, keys {@code k<offset>}, CreateTime), and their catalog rows.
 */
final class TestBlobs {
  static final String TOPIC = "flights";
  static final int PARTITION = 2;

  private TestBlobs() {}

  /**
   * Writes {@code batches} of offsets to {@code dir/name} and returns its sealed row, {@code
   * blobDir} its directory.
   */
  static BlobRow write(Path dir, String name, long start, long end, long[]... batches)
      throws IOException {
    Path path = dir.resolve(name);
    try (DataFileWriter<GenericRecord> writer =
        new DataFileWriter<>(new GenericDatumWriter<GenericRecord>(BlobFormat.SCHEMA))) {
      writer.create(BlobFormat.SCHEMA, path.toFile());
      for (long[] offsets : batches) {
        writer.append(batch(offsets));
      }
    }
    long tuples = 0;
    Long first = null;
    Long last = null;
    for (long[] offsets : batches) {
      if (offsets.length > 0) {
        tuples += offsets.length;
        first = first == null ? offsets[0] : first;
        last = offsets[offsets.length - 1];
      }
    }
    String sha256;
    try (FileChannel channel = FileChannel.open(path)) {
      sha256 = RegisteredBlob.sha256(channel);
    }
    return new BlobRow(
        1,
        TOPIC,
        PARTITION,
        start,
        end,
        path.toString(),
        Files.size(path),
        tuples,
        sha256,
        first,
        last,
        dir.toString());
  }

  /** One {@code SweptBatch} of records at {@code offsets}. */
  static GenericRecord batch(long[] offsets) {
    int n = offsets.length;
    ByteBuffer offsetColumn = le(8 * n);
    ByteBuffer timestamps = le(8 * n);
    ByteBuffer kinds = ByteBuffer.allocate(n);
    ByteBuffer keyLengths = le(4 * n);
    ByteBuffer valueLengths = le(4 * n);
    StringBuilder keys = new StringBuilder();
    StringBuilder values = new StringBuilder();
    for (long offset : offsets) {
      offsetColumn.putLong(offset);
      timestamps.putLong(1_700_000_000_000L + offset);
      kinds.put((byte) 1);
      String key = "k" + offset;
      String value = "v" + offset;
      keyLengths.putInt(key.length());
      valueLengths.putInt(value.length());
      keys.append(key);
      values.append(value);
    }
    GenericRecord row = new GenericData.Record(BlobFormat.SCHEMA);
    row.put("offsets", offsetColumn.flip());
    row.put("timestamps", timestamps.flip());
    row.put("timestamp_types", kinds.flip());
    row.put("key_lengths", keyLengths.flip());
    row.put("keys", ByteBuffer.wrap(keys.toString().getBytes()));
    row.put("value_lengths", valueLengths.flip());
    row.put("values", ByteBuffer.wrap(values.toString().getBytes()));
    row.put("headers", List.of());
    return row;
  }

  private static ByteBuffer le(int size) {
    return ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
  }

  /** {@code row} with other seal fields. */
  static BlobRow withSeal(BlobRow row, long bytes, long tuples, Long first, Long last) {
    return new BlobRow(
        row.id(),
        row.topic(),
        row.partition(),
        row.startOffset(),
        row.endOffset(),
        row.path(),
        bytes,
        tuples,
        row.sha256(),
        first,
        last,
        row.blobDir());
  }

  /** {@code row} naming another file, or another BLOB directory. */
  static BlobRow at(BlobRow row, String path, String blobDir) {
    return new BlobRow(
        row.id(),
        row.topic(),
        row.partition(),
        row.startOffset(),
        row.endOffset(),
        path,
        row.bytes(),
        row.tuples(),
        row.sha256(),
        row.firstOffset(),
        row.lastOffset(),
        blobDir);
  }

  /** {@code row} as registered before checksums (no seal). */
  static BlobRow unsealed(BlobRow row) {
    return new BlobRow(
        row.id(),
        row.topic(),
        row.partition(),
        row.startOffset(),
        row.endOffset(),
        row.path(),
        row.bytes(),
        row.tuples(),
        null,
        null,
        null,
        row.blobDir());
  }
}
