package io.floodgate.spark.swept;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/**
 * The swept BLOB format (docs/formats.md, "Swept BLOBs"; the sweeper writes it with {@code
 * pipeline.swept.blob}): an Avro container file of {@code floodgate.sweep.SweptBatch} records, each
 * a run of consecutive Kafka records of one partition column by column. Integers are packed
 * little-endian ({@code offsets}, {@code timestamps} int64; {@code key_lengths}, {@code
 * value_lengths} int32, -1 for null), one byte of timestamp type per record (confluent-kafka's
 * kinds: 0 none, 1 CreateTime, 2 LogAppendTime), keys and values concatenated; headers one row per
 * header, naming its record by index in the batch.
 */
public final class BlobFormat {
  /** The Avro record's full name, checked in every file's header. */
  public static final String RECORD_NAME = "floodgate.sweep.SweptBatch";

  /**
   * The reader's schema: {@code schemas/formats/swept_batch.avsc} of the repository, the writer's,
   * packed in the jar beside this class.
   */
  public static final Schema SCHEMA = load("swept_batch.avsc");

  private BlobFormat() {}

  private static Schema load(String name) {
    try (InputStream in = BlobFormat.class.getResourceAsStream(name)) {
      if (in == null) {
        throw new IllegalStateException(name + " is not packed in the jar beside BlobFormat");
      }
      return new Schema.Parser().parse(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The {@code offsets} column of a batch, in file order. */
  public static long[] offsets(GenericRecord batch) {
    return longs((ByteBuffer) batch.get("offsets"), "offsets");
  }

  /**
   * The Kafka records of one batch (as {@code pipeline.swept.blob.records_of_batch} reads them).
   *
   * @param batch a {@link #SCHEMA} record
   * @param offsets its {@link #offsets}
   * @throws IllegalArgumentException the columns differ in length, a length column disagrees with
   *     its bytes, a header names no record, or a timestamp type is not 0, 1 or 2
   */
  public static List<ConsumerRecord<byte[], byte[]>> records(
      GenericRecord batch, long[] offsets, String topic, int partition) {
    int n = offsets.length;
    long[] timestamps = longs((ByteBuffer) batch.get("timestamps"), "timestamps");
    byte[] kinds = bytes((ByteBuffer) batch.get("timestamp_types"));
    byte[][] keys =
        split(ints((ByteBuffer) batch.get("key_lengths")), (ByteBuffer) batch.get("keys"), "keys");
    byte[][] values =
        split(
            ints((ByteBuffer) batch.get("value_lengths")),
            (ByteBuffer) batch.get("values"),
            "values");
    if (timestamps.length != n || kinds.length != n || keys.length != n || values.length != n) {
      throw new IllegalArgumentException("the columns of a BLOB batch differ in length");
    }
    RecordHeaders[] headers = new RecordHeaders[n];
    Object rows = batch.get("headers");
    if (rows != null) {
      for (Object item : (List<?>) rows) {
        GenericRecord header = (GenericRecord) item;
        int at = (Integer) header.get("record");
        if (at < 0 || at >= n) {
          throw new IllegalArgumentException(
              "a BLOB header names record " + at + " of a batch of " + n);
        }
        if (headers[at] == null) {
          headers[at] = new RecordHeaders();
        }
        ByteBuffer value = (ByteBuffer) header.get("value");
        headers[at].add(header.get("key").toString(), value == null ? null : bytes(value));
      }
    }
    List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      out.add(
          new ConsumerRecord<>(
              topic,
              partition,
              offsets[i],
              timestamps[i],
              timestampType(kinds[i]),
              keys[i] == null ? -1 : keys[i].length,
              values[i] == null ? -1 : values[i].length,
              keys[i],
              values[i],
              headers[i] == null ? new RecordHeaders() : headers[i],
              Optional.empty()));
    }
    return out;
  }

  /** confluent-kafka's timestamp kind (0 none, 1 CreateTime, 2 LogAppendTime) as Kafka's. */
  static TimestampType timestampType(byte kind) {
    return switch (kind) {
      case 0 -> TimestampType.NO_TIMESTAMP_TYPE;
      case 1 -> TimestampType.CREATE_TIME;
      case 2 -> TimestampType.LOG_APPEND_TIME;
      default -> throw new IllegalArgumentException("a BLOB record's timestamp type is " + kind);
    };
  }

  private static byte[] bytes(ByteBuffer buffer) {
    ByteBuffer view = buffer.duplicate();
    byte[] out = new byte[view.remaining()];
    view.get(out);
    return out;
  }

  private static long[] longs(ByteBuffer buffer, String column) {
    ByteBuffer view = buffer.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    if (view.remaining() % 8 != 0) {
      throw new IllegalArgumentException(
          "a BLOB's " + column + " column holds " + view.remaining() + " bytes, not int64s");
    }
    long[] out = new long[view.remaining() / 8];
    view.asLongBuffer().get(out);
    return out;
  }

  private static int[] ints(ByteBuffer buffer) {
    ByteBuffer view = buffer.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    if (view.remaining() % 4 != 0) {
      throw new IllegalArgumentException(
          "a BLOB's length column holds " + view.remaining() + " bytes, not int32s");
    }
    int[] out = new int[view.remaining() / 4];
    view.asIntBuffer().get(out);
    return out;
  }

  /**
   * As {@code pipeline.swept.blob._split}: lengths below 0 are null, the others slice {@code data}
   * in order.
   */
  private static byte[][] split(int[] lengths, ByteBuffer data, String column) {
    ByteBuffer view = data.duplicate();
    byte[][] out = new byte[lengths.length][];
    for (int i = 0; i < lengths.length; i++) {
      if (lengths[i] < 0) {
        continue;
      }
      if (lengths[i] > view.remaining()) {
        throw new IllegalArgumentException(
            "a BLOB's " + column + " column is shorter than its lengths");
      }
      out[i] = new byte[lengths[i]];
      view.get(out[i]);
    }
    if (view.hasRemaining()) {
      throw new IllegalArgumentException(
          "a BLOB's "
              + column
              + " column holds "
              + data.remaining()
              + " bytes, its lengths "
              + (data.remaining() - view.remaining()));
    }
    return out;
  }
}
