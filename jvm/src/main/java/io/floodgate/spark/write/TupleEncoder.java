package io.floodgate.spark.write;

import java.io.Serializable;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Encodes a query's output rows into the Kafka records of its output stream, on Spark's executors:
 * the record value, Avro in the stream's encoding, and the record key, the key columns' text joined
 * with {@code |}. The bytes are exactly those the Python sink writes for the same row ({@code
 * KafkaTransactionalSink.write}, {@code pipeline/spark/sink.py}), given the row as Spark hands it
 * to Python through Arrow ({@code DataFrame.toArrow().to_pylist()}):
 *
 * <ul>
 *   <li>the value: each field of the schema, in its order, from the row's column of that name (a
 *       field with no column is null: the Python sink takes every field from the row, so a schema
 *       default is never used), checked and converted by the rules of Python's {@code
 *       StreamCodec.normalise} (below), then written as the Avro binary encoding (Avro
 *       specification, "Binary Encoding") after the framing: single-object encoding ({@code C3 01},
 *       the schema's CRC-64-AVRO fingerprint little-endian, {@link
 *       SchemaNormalization#parsingFingerprint64}; Avro specification, "Single-object encoding") or
 *       the Confluent wire format ({@code 00}, the registry's 4-byte schema id big-endian). Columns
 *       the schema lacks are ignored;
 *   <li>the key: Python's {@code TupleKey}/{@code key_text} of the key columns' values, taken from
 *       the normalised record when every key column is a field of the schema, else from the row as
 *       it is; a null is the empty text, an integer its digits, a float Python's {@code repr}
 *       ({@code 1.0}, {@code 1e+16}, {@code nan}, {@code inf}), a boolean {@code True}/{@code
 *       False}, a timestamp its UTC epoch milliseconds rounded towards the past, a date its days
 *       since 1970-01-01, a binary Python's {@code repr} of bytes ({@code b'..'}). Always raw text:
 *       the sink never writes a Confluent-encoded key.
 * </ul>
 *
 * <p>Field types (also as {@code T} of {@code ["null", T]} or {@code [T, "null"]}) and the Spark
 * column types each takes, as {@code normalise} and fastavro take the Python values of those
 * columns:
 *
 * <ul>
 *   <li>{@code int}: tinyint, smallint, int; bigint within 32 bits; float/double with no fraction,
 *       within 32 bits (NaN and infinities refused);
 *   <li>{@code long}: tinyint, smallint, int, bigint; float/double with no fraction within 64 bits;
 *   <li>{@code timestamp-millis} ({@code long}): timestamp and timestamp_ntz (microseconds to
 *       milliseconds, rounded towards the past, as Python's {@code epoch_ms}); the integers and
 *       whole floats as epoch milliseconds;
 *   <li>{@code timestamp-micros} ({@code long}): timestamp and timestamp_ntz (microseconds as they
 *       are, as fastavro writes a {@code datetime}); the integers as epoch microseconds;
 *   <li>{@code date} ({@code int}): date (days); the integers and whole floats as days, within 32
 *       bits; a timestamp is refused;
 *   <li>{@code double}, {@code float}: float, double and the integers (made a double first, as
 *       Python's {@code float()}; a {@code float} field then rounds that double to 32 bits, as
 *       fastavro does: a bigint is rounded twice, as in Python);
 *   <li>{@code boolean}: boolean;
 *   <li>{@code string}: string; {@code bytes}: binary; {@code enum}: a string that is one of its
 *       symbols.
 * </ul>
 *
 * Any other column type for a field is refused at its first non-null value, with the reason Python
 * gives; a boolean is never a number. A null is written as the union's null branch, and refused for
 * a field that is not a union with null. Where this encoder and Python differ: a null for a {@code
 * boolean} field that is no union is refused here (fastavro writes it as false); a boolean, float
 * or double column for a {@code timestamp-micros} field is refused here (fastavro truncates it into
 * an integer); a whole float beyond 64 bits for a {@code long} or {@code timestamp-millis} field is
 * refused with a {@link TupleRefusedException} here, an {@code OverflowError} in Python; and the
 * construction refuses what no row could be written with (below), where Python refuses only a row
 * with a non-null value there.
 *
 * <p>Its parts: {@link AvroKind} and {@link SparkColumn} (the types on either side), {@link
 * FieldSource} (a column read and converted by Python's rules), {@link FieldWriter} (a field's Avro
 * writer), {@link KeyPart} (a key column's text), {@link PythonText} (Python's texts of values) and
 * {@link AvroOut} (the output buffer).
 *
 * <p>Not thread-safe: one output buffer per encoder, reused by every call; one encoder per task
 * (serializable: a deserialized encoder is built again from what it was made of).
 */
public final class TupleEncoder implements Serializable {
  private static final long serialVersionUID = 1L;

  // What the encoder is made of (serialized).
  private final String stream;
  private final StructType rowType;
  private final String schemaJson;
  private final List<String> keyColumns;
  private final boolean confluent;
  private final int schemaId;

  // Built from it.
  private final transient byte[] header;
  private final transient int[] ordinals;
  private final transient int[] nullBranches;
  private final transient int[] valueBranches;
  private final transient FieldWriter[] fields;
  private final transient KeyPart[] keyParts;
  private final transient AvroOut out = new AvroOut();
  private final transient AvroOut keyOut = new AvroOut();

  /**
   * An encoder of Avro single-object encoding, the default {@code encoding} of a stream.
   *
   * @param stream the output stream's name (refusals name it)
   * @param rowType the Spark schema of the query's output rows
   * @param schema the output stream's Avro record schema (the writer schema)
   * @param keyColumns the columns of the record key, in order; empty: records have no key
   * @throws IllegalArgumentException the schema is not a record, a field has a type this encoder
   *     does not write (records, arrays, maps, fixed, a union other than {@code ["null", T]}, a
   *     logical type other than {@code timestamp-millis}, {@code timestamp-micros} and {@code
   *     date}), or a column that a field or the key takes has a Spark type other than tinyint,
   *     smallint, int, bigint, float, double, boolean, string, binary, date, timestamp and
   *     timestamp_ntz
   */
  public static TupleEncoder singleObject(
      String stream, StructType rowType, Schema schema, List<String> keyColumns) {
    return new TupleEncoder(stream, rowType, schema.toString(), keyColumns, false, 0);
  }

  /**
   * An encoder of the Confluent wire format ({@code encoding = "confluent"}): {@code 00}, {@code
   * schemaId} as 4 bytes big-endian, the Avro body.
   *
   * @param schemaId the id the Schema Registry gave {@code schema} under the stream's subject
   * @see #singleObject
   */
  public static TupleEncoder confluent(
      String stream, StructType rowType, Schema schema, List<String> keyColumns, int schemaId) {
    return new TupleEncoder(stream, rowType, schema.toString(), keyColumns, true, schemaId);
  }

  private TupleEncoder(
      String stream,
      StructType rowType,
      String schemaJson,
      List<String> keyColumns,
      boolean confluent,
      int schemaId) {
    this.stream = stream;
    this.rowType = rowType;
    this.schemaJson = schemaJson;
    this.keyColumns = List.copyOf(keyColumns);
    this.confluent = confluent;
    this.schemaId = schemaId;
    Schema schema = new Schema.Parser().parse(schemaJson);
    if (schema.getType() != Schema.Type.RECORD) {
      throw new IllegalArgumentException(
          "stream '" + stream + "': the output schema is not a record: " + schema);
    }
    header = confluent ? confluentHeader(schemaId) : singleObjectHeader(schema);
    Map<String, Integer> columns = new HashMap<>();
    StructField[] sparkFields = rowType.fields();
    for (int i = 0; i < sparkFields.length; i++) {
      columns.put(sparkFields[i].name(), i); // a repeated name: the last, as to_pylist() keeps
    }
    List<Schema.Field> avroFields = schema.getFields();
    int n = avroFields.size();
    ordinals = new int[n];
    nullBranches = new int[n];
    valueBranches = new int[n];
    fields = new FieldWriter[n];
    Map<String, FieldWriter> byName = new HashMap<>();
    for (int i = 0; i < n; i++) {
      Schema.Field f = avroFields.get(i);
      Integer ordinal = columns.get(f.name());
      ordinals[i] = ordinal == null ? -1 : ordinal;
      Schema type = f.schema();
      nullBranches[i] = -1;
      valueBranches[i] = -1;
      if (type.getType() == Schema.Type.UNION) {
        List<Schema> branches = type.getTypes();
        Schema value = null;
        for (int b = 0; b < branches.size(); b++) {
          if (branches.get(b).getType() == Schema.Type.NULL) {
            nullBranches[i] = b;
          } else if (value == null) {
            value = branches.get(b);
            valueBranches[i] = b;
          } else {
            value = null;
            break;
          }
        }
        if (value == null || nullBranches[i] < 0 || branches.size() != 2) {
          throw new IllegalArgumentException(
              "stream '"
                  + stream
                  + "': field '"
                  + f.name()
                  + "' is a union of "
                  + type
                  + "; the sink writes only [\"null\", T]");
        }
        type = value;
      }
      AvroKind kind = AvroKind.of(stream, f.name(), type);
      // No column: every row has a null there (its column type is never read).
      SparkColumn column =
          ordinal == null
              ? SparkColumn.INT
              : SparkColumn.of(stream, f.name(), sparkFields[ordinal]);
      FieldSource source =
          new FieldSource(
              stream, schema.getFullName(), f.name(), ordinals[i], column, kind, type.toString());
      if (kind == AvroKind.ENUM) {
        source.symbols = new HashMap<>();
        List<String> symbols = type.getEnumSymbols();
        for (int s = 0; s < symbols.size(); s++) {
          source.symbols.put(UTF8String.fromString(symbols.get(s)), s);
        }
      }
      fields[i] = FieldWriter.of(source);
      byName.put(f.name(), fields[i]);
    }
    if (this.keyColumns.isEmpty()) {
      keyParts = null;
    } else {
      boolean normalised = byName.keySet().containsAll(this.keyColumns);
      keyParts = new KeyPart[this.keyColumns.size()];
      for (int k = 0; k < keyParts.length; k++) {
        String name = this.keyColumns.get(k);
        Integer ordinal = columns.get(name);
        if (ordinal == null) {
          keyParts[k] = KeyPart.NOTHING;
        } else if (normalised) {
          keyParts[k] = KeyPart.normalised(byName.get(name).source);
        } else {
          SparkColumn column = SparkColumn.of(stream, name, sparkFields[ordinal]);
          keyParts[k] = KeyPart.raw(new FieldSource(stream, "", name, ordinal, column, null, ""));
        }
      }
    }
  }

  /** Built again from what it was made of: the transient parts are not serialized. */
  private Object readResolve() {
    return new TupleEncoder(stream, rowType, schemaJson, keyColumns, confluent, schemaId);
  }

  /**
   * The single-object encoding's header of {@code schema}: {@code C3 01} and the 8 bytes of its
   * CRC-64-AVRO fingerprint (of its Parsing Canonical Form), little-endian, as Python's {@code
   * pipeline.serde.schemas.fingerprint} gives them (Avro specification, "Single-object encoding").
   */
  public static byte[] singleObjectHeader(Schema schema) {
    long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
    byte[] out = new byte[10];
    out[0] = (byte) 0xC3;
    out[1] = 0x01;
    for (int i = 0; i < 8; i++) {
      out[2 + i] = (byte) (fingerprint >>> (8 * i));
    }
    return out;
  }

  private static byte[] confluentHeader(int schemaId) {
    return new byte[] {
      0,
      (byte) (schemaId >>> 24),
      (byte) (schemaId >>> 16),
      (byte) (schemaId >>> 8),
      (byte) schemaId
    };
  }

  /**
   * The record key of {@code row}: UTF-8 text, the key columns' texts joined with {@code |} (see
   * the class's description).
   *
   * @param row an output row of the encoder's row type
   * @return a new array, or {@code null} when the encoder has no key columns
   * @throws TupleRefusedException a key column is a field whose value the field does not take (the
   *     same refusal as {@link #value})
   */
  public byte[] key(InternalRow row) {
    if (keyParts == null) {
      return null;
    }
    AvroOut o = keyOut;
    o.pos = 0;
    for (int k = 0; k < keyParts.length; k++) {
      if (k > 0) {
        o.writeByte('|');
      }
      keyParts[k].append(row, o);
    }
    return o.toByteArray();
  }

  /**
   * The record value of {@code row}: the framing, then the Avro binary body of the schema's fields.
   *
   * @param row an output row of the encoder's row type
   * @return a new array
   * @throws TupleRefusedException a field's value is not one the field takes (names the stream, the
   *     field, the value and what the field takes)
   */
  public byte[] value(InternalRow row) {
    AvroOut o = out;
    o.pos = 0;
    o.writeRaw(header);
    for (int i = 0; i < fields.length; i++) {
      int ordinal = ordinals[i];
      if (ordinal < 0 || row.isNullAt(ordinal)) {
        if (nullBranches[i] < 0) {
          throw fields[i].source.notNullable();
        }
        o.writeInt(nullBranches[i]);
        continue;
      }
      if (valueBranches[i] >= 0) {
        o.writeInt(valueBranches[i]);
      }
      fields[i].write(row, o);
    }
    return o.toByteArray();
  }

  /** The output stream's name. */
  public String stream() {
    return stream;
  }
}
