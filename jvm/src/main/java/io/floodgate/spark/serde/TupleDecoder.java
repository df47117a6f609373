package io.floodgate.spark.serde;

import java.io.IOException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.avro.InvalidNumberEncodingException;
import org.apache.avro.Schema;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.ResolvingDecoder;
import org.apache.avro.util.Utf8;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Decodes a stream's tuples, Avro records in single-object encoding ({@code C3 01}, the writer
 * schema's CRC-64-AVRO fingerprint little-endian, the binary body), straight into the columns of a
 * Spark row, with no Avro object per tuple.
 *
 * <p>The reader schema holds only the fields the queries read ({@link #projection}): Avro's schema
 * resolution skips the others in the body, so an unused string costs a length read, not a decode
 * (the peer's {@code from_avro} decodes every field). A tuple written with an older schema of the
 * repository is resolved to the stream's (Avro's rules: promotions, defaults for added fields); one
 * whose fingerprint the repository does not know is refused, {@code unknown-fingerprint}.
 *
 * <p>The framing is a subclass's to change: {@link #writerKey} reads what names the writer schema,
 * {@link #headerSize} says where the body starts, {@link #writerSchema} finds the schema of a key
 * (once per key and decoder), as {@link ConfluentDecoder} does for the Confluent wire format.
 *
 * <p>Not thread-safe: one per task.
 */
public class TupleDecoder {
  /** Bytes before the body: marker and fingerprint. */
  public static final int HEADER_SIZE = 10;

  private final String stream;
  private final Schema readerSchema;
  private final SchemaRepository repository;
  private final FieldWriter[] writers;
  private final Map<Long, ResolvingDecoder> resolvers = new HashMap<>();
  private BinaryDecoder binary;
  private final Utf8 scratch = new Utf8();

  /**
   * @param stream the stream's name (for errors)
   * @param schema the stream's schema
   * @param repository every schema a tuple may be written with
   * @param fields the stream's fields to decode, with their row ordinals ({@code ordinals[i]} the
   *     row column of {@code fields.get(i)})
   * @param ordinals the row ordinal of each field
   */
  public TupleDecoder(
      String stream,
      Schema schema,
      SchemaRepository repository,
      List<String> fields,
      int[] ordinals) {
    this(stream, schema, fields, ordinals, repository);
  }

  /**
   * A decoder whose framing names its writer schemas elsewhere (a subclass's {@link #writerKey} and
   * {@link #writerSchema}).
   *
   * @param stream the stream's name (for errors)
   * @param schema the stream's schema (the reader schema)
   * @param fields the stream's fields to decode
   * @param ordinals the row ordinal of each field
   */
  protected TupleDecoder(String stream, Schema schema, List<String> fields, int[] ordinals) {
    this(stream, schema, fields, ordinals, null);
  }

  private TupleDecoder(
      String stream,
      Schema schema,
      List<String> fields,
      int[] ordinals,
      SchemaRepository repository) {
    this.stream = stream;
    this.repository = repository;
    this.readerSchema = projection(schema, fields);
    this.writers = new FieldWriter[readerSchema.getFields().size()];
    for (Schema.Field f : readerSchema.getFields()) {
      writers[f.pos()] = FieldWriter.of(f.schema(), ordinals[fields.indexOf(f.name())]);
    }
  }

  /**
   * The record schema of {@code schema} with only {@code fields}, in the schema's order; the same
   * name, so Avro resolves every writer schema of the stream against it.
   */
  public static Schema projection(Schema schema, List<String> fields) {
    List<Schema.Field> kept =
        schema.getFields().stream()
            .filter(f -> fields.contains(f.name()))
            .map(f -> new Schema.Field(f, f.schema()))
            .toList();
    Schema projected =
        Schema.createRecord(schema.getName(), schema.getDoc(), schema.getNamespace(), false);
    projected.setFields(kept);
    return projected;
  }

  /** The writer fingerprint of an encoded tuple. */
  public long fingerprint(byte[] data) throws TupleRejected {
    if (data == null || data.length < HEADER_SIZE || data[0] != (byte) 0xC3 || data[1] != 0x01) {
      String start =
          data == null || data.length == 0
              ? "empty"
              : HexFormat.of().formatHex(data, 0, Math.min(4, data.length));
      throw new TupleRejected(
          "bad-marker",
          "not Avro single-object encoding (starts " + start + ", expected marker c301)");
    }
    long fingerprint = 0;
    for (int i = HEADER_SIZE - 1; i >= 2; i--) {
      fingerprint = (fingerprint << 8) | (data[i] & 0xFF);
    }
    return fingerprint;
  }

  /**
   * Decode {@code data} into {@code row}: each decoded field at its ordinal.
   *
   * @throws TupleRejected {@code bad-marker}, {@code unknown-fingerprint} or {@code bad-body}
   *     (single-object encoding; a subclass's framing has its own reasons)
   */
  public void decode(byte[] data, InternalRow row) throws TupleRejected {
    long key = writerKey(data);
    int header = headerSize();
    decodeBody(key, data, header, data.length - header, row);
  }

  /**
   * The framing: what names the writer schema of {@code data} (here its fingerprint), checked
   * before the body is read; {@code data} is at least {@link #headerSize()} bytes when this
   * returns.
   *
   * @throws TupleRejected the tuple is not in the framing ({@code bad-marker} here)
   */
  protected long writerKey(byte[] data) throws TupleRejected {
    return fingerprint(data);
  }

  /** Bytes of the framing before the body: {@link #HEADER_SIZE} here. */
  protected int headerSize() {
    return HEADER_SIZE;
  }

  /** The writer schema of {@code key}, as errors name it. */
  protected String writerName(long key) {
    return "schema '" + repository.nameOf(key) + "'";
  }

  /** Decode a body written with the schema of {@code key} (a {@link #writerKey}). */
  protected void decodeBody(long key, byte[] data, int start, int length, InternalRow row)
      throws TupleRejected {
    ResolvingDecoder resolver = resolver(key);
    binary = DecoderFactory.get().binaryDecoder(data, start, length, binary);
    try {
      resolver.configure(binary);
      for (Schema.Field f : resolver.readFieldOrder()) {
        writers[f.pos()].read(resolver, row, scratch);
      }
      resolver.drain();
    } catch (InvalidNumberEncodingException | ArithmeticException e) {
      // A varint too long for an Avro int or long (a careless producer's 40-bit int), or a
      // timestamp beyond Spark's range: the value does not fit its column, reason bad-value
      // (docs/reference/codes.md, "Dead letters").
      throw new TupleRejected("bad-value", "a value does not fit its column: " + e.getMessage(), e);
    } catch (IOException | RuntimeException e) {
      throw new TupleRejected(
          "bad-body",
          "Avro body does not decode with "
              + writerName(key)
              + ": "
              + e.getClass().getSimpleName()
              + ": "
              + e.getMessage(),
          e);
    }
  }

  private ResolvingDecoder resolver(long key) throws TupleRejected {
    ResolvingDecoder resolver = resolvers.get(key);
    if (resolver == null) {
      Schema writer = writerSchema(key);
      try {
        resolver = DecoderFactory.get().resolvingDecoder(writer, readerSchema, null);
      } catch (IOException | RuntimeException e) {
        throw new TupleRejected(
            "bad-body", "writer schema does not resolve to the stream's: " + e.getMessage(), e);
      }
      resolvers.put(key, resolver);
    }
    return resolver;
  }

  /**
   * The writer schema of {@code fingerprint}, asked once per key and decoder; subclasses look
   * elsewhere (a registry).
   *
   * @throws TupleRejected no such schema ({@code unknown-fingerprint} here)
   */
  protected Schema writerSchema(long fingerprint) throws TupleRejected {
    Schema writer = repository.byFingerprint(fingerprint);
    if (writer == null) {
      throw new TupleRejected(
          "unknown-fingerprint",
          "unknown schema fingerprint "
              + HexFormat.of().formatHex(littleEndian(fingerprint))
              + "; the schema repository knows "
              + new TreeSet<>(repository.names()));
    }
    return writer;
  }

  static byte[] littleEndian(long value) {
    byte[] out = new byte[8];
    for (int i = 0; i < 8; i++) {
      out[i] = (byte) (value >>> (8 * i));
    }
    return out;
  }

  public String stream() {
    return stream;
  }

  /** Reads one field's value into its row column, in Spark's internal representation. */
  abstract static class FieldWriter {
    final int ordinal;

    FieldWriter(int ordinal) {
      this.ordinal = ordinal;
    }

    abstract void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException;

    static FieldWriter of(Schema schema, int ordinal) {
      if (schema.getType() == Schema.Type.UNION) {
        List<Schema> branches = schema.getTypes();
        FieldWriter[] byBranch = new FieldWriter[branches.size()];
        for (int i = 0; i < branches.size(); i++) {
          byBranch[i] =
              branches.get(i).getType() == Schema.Type.NULL
                  ? new Null(ordinal)
                  : of(branches.get(i), ordinal);
        }
        return new Union(ordinal, byBranch);
      }
      String logical = schema.getProp("logicalType");
      switch (schema.getType()) {
        case INT:
          return new IntField(ordinal);
        case LONG:
          return "timestamp-millis".equals(logical)
              ? new LongField(ordinal, 1000)
              : new LongField(ordinal, 1);
        case FLOAT:
          return new FloatField(ordinal);
        case DOUBLE:
          return new DoubleField(ordinal);
        case BOOLEAN:
          return new BooleanField(ordinal);
        case STRING:
          return new StringField(ordinal);
        case BYTES:
          return new BytesField(ordinal);
        case ENUM:
          return new EnumField(ordinal, schema.getEnumSymbols());
        default:
          throw new IllegalArgumentException(
              "Avro type " + schema + " has no Spark column in the source");
      }
    }
  }

  static final class Null extends FieldWriter {
    Null(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      in.readNull();
      row.setNullAt(ordinal);
    }
  }

  static final class Union extends FieldWriter {
    private final FieldWriter[] branches;

    Union(int ordinal, FieldWriter[] branches) {
      super(ordinal);
      this.branches = branches;
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      branches[in.readIndex()].read(in, row, scratch);
    }
  }

  static final class IntField extends FieldWriter {
    IntField(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.setInt(ordinal, in.readInt());
    }
  }

  /** A long; a timestamp-millis is scaled to Spark's microseconds. */
  static final class LongField extends FieldWriter {
    private final long scale;

    LongField(int ordinal, long scale) {
      super(ordinal);
      this.scale = scale;
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.setLong(ordinal, Math.multiplyExact(in.readLong(), scale));
    }
  }

  static final class FloatField extends FieldWriter {
    FloatField(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.setFloat(ordinal, in.readFloat());
    }
  }

  static final class DoubleField extends FieldWriter {
    DoubleField(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.setDouble(ordinal, in.readDouble());
    }
  }

  static final class BooleanField extends FieldWriter {
    BooleanField(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.setBoolean(ordinal, in.readBoolean());
    }
  }

  static final class StringField extends FieldWriter {
    StringField(int ordinal) {
      super(ordinal);
    }

    /**
     * A copy of the text's bytes: {@code scratch} is read into again by the next string, and {@code
     * UTF8String.clone()} would share its array when the text fills it exactly.
     */
    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      Utf8 text = in.readString(scratch);
      row.update(
          ordinal, UTF8String.fromBytes(Arrays.copyOf(text.getBytes(), text.getByteLength())));
    }
  }

  static final class BytesField extends FieldWriter {
    BytesField(int ordinal) {
      super(ordinal);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      java.nio.ByteBuffer buffer = in.readBytes(null);
      byte[] bytes = new byte[buffer.remaining()];
      buffer.get(bytes);
      row.update(ordinal, bytes);
    }
  }

  static final class EnumField extends FieldWriter {
    private final UTF8String[] symbols;

    EnumField(int ordinal, List<String> symbols) {
      super(ordinal);
      this.symbols = symbols.stream().map(UTF8String::fromString).toArray(UTF8String[]::new);
    }

    @Override
    void read(ResolvingDecoder in, InternalRow row, Utf8 scratch) throws IOException {
      row.update(ordinal, symbols[in.readEnum()]);
    }
  }
}
