package io.floodgate.spark.write;

import java.io.Serializable;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.io.BinaryData;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
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
 * <p>Not thread-safe: one output buffer per encoder, reused by every call; one encoder per task
 * (serializable: a deserialized encoder is built again from what it was made of).
 */
public final class TupleEncoder implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The range of an Avro {@code int}. */
  private static final String INT_RANGE = "(-2147483648..2147483647)";

  private static final String FRACTION =
      "an integer field takes an int, or a float with no fraction (1545.0); it is never truncated";

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
  private final transient Field[] fields;
  private final transient KeyPart[] keyParts;
  private final transient Out out = new Out();
  private final transient Out keyOut = new Out();

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
    fields = new Field[n];
    Map<String, Field> byName = new HashMap<>();
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
      Kind kind = Kind.of(stream, f.name(), type);
      // No column: every row has a null there (its column type is never read).
      Column column =
          ordinal == null ? Column.INT : Column.of(stream, f.name(), sparkFields[ordinal]);
      Source source =
          new Source(
              stream, schema.getFullName(), f.name(), ordinals[i], column, kind, type.toString());
      if (kind == Kind.ENUM) {
        source.symbols = new HashMap<>();
        List<String> symbols = type.getEnumSymbols();
        for (int s = 0; s < symbols.size(); s++) {
          source.symbols.put(UTF8String.fromString(symbols.get(s)), s);
        }
      }
      fields[i] = Field.of(source);
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
          Column column = Column.of(stream, name, sparkFields[ordinal]);
          keyParts[k] = KeyPart.raw(new Source(stream, "", name, ordinal, column, null, ""));
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
    Out o = keyOut;
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
    Out o = out;
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

  /** What an Avro field holds, as the rules of the class's description tell them apart. */
  enum Kind {
    INT,
    LONG,
    TIMESTAMP_MILLIS,
    TIMESTAMP_MICROS,
    DATE,
    FLOAT,
    DOUBLE,
    BOOLEAN,
    STRING,
    BYTES,
    ENUM;

    static Kind of(String stream, String field, Schema type) {
      String logical = type.getProp("logicalType");
      Schema.Type base = type.getType();
      if (logical != null) {
        if (base == Schema.Type.LONG && logical.equals("timestamp-millis")) {
          return TIMESTAMP_MILLIS;
        }
        if (base == Schema.Type.LONG && logical.equals("timestamp-micros")) {
          return TIMESTAMP_MICROS;
        }
        if (base == Schema.Type.INT && logical.equals("date")) {
          return DATE;
        }
        throw unsupported(stream, field, type);
      }
      switch (base) {
        case INT:
          return INT;
        case LONG:
          return LONG;
        case FLOAT:
          return FLOAT;
        case DOUBLE:
          return DOUBLE;
        case BOOLEAN:
          return BOOLEAN;
        case STRING:
          return STRING;
        case BYTES:
          return BYTES;
        case ENUM:
          return ENUM;
        default:
          throw unsupported(stream, field, type);
      }
    }

    private static IllegalArgumentException unsupported(String stream, String field, Schema t) {
      return new IllegalArgumentException(
          "stream '"
              + stream
              + "': field '"
              + field
              + "' has Avro type "
              + t
              + ", which the sink does not write (it writes int, long, float, double, boolean,"
              + " string, bytes, enum, timestamp-millis, timestamp-micros and date)");
    }
  }

  /** A Spark column's type, with the name of the Python type Arrow gives its values. */
  enum Column {
    BYTE("int"),
    SHORT("int"),
    INT("int"),
    LONG("int"),
    FLOAT("float"),
    DOUBLE("float"),
    BOOLEAN("bool"),
    STRING("str"),
    BINARY("bytes"),
    DATE("date"),
    TIMESTAMP("datetime"),
    TIMESTAMP_NTZ("datetime");

    final String python;

    Column(String python) {
      this.python = python;
    }

    boolean integer() {
      return this == BYTE || this == SHORT || this == INT || this == LONG;
    }

    static Column of(String stream, String name, StructField field) {
      DataType t = field.dataType();
      if (t instanceof ByteType) {
        return BYTE;
      } else if (t instanceof ShortType) {
        return SHORT;
      } else if (t instanceof IntegerType) {
        return INT;
      } else if (t instanceof LongType) {
        return LONG;
      } else if (t instanceof FloatType) {
        return FLOAT;
      } else if (t instanceof DoubleType) {
        return DOUBLE;
      } else if (t instanceof BooleanType) {
        return BOOLEAN;
      } else if (t instanceof StringType) {
        return STRING;
      } else if (t instanceof BinaryType) {
        return BINARY;
      } else if (t instanceof DateType) {
        return DATE;
      } else if (t instanceof TimestampType) {
        return TIMESTAMP;
      } else if (t instanceof TimestampNTZType) {
        return TIMESTAMP_NTZ;
      }
      throw new IllegalArgumentException(
          "stream '"
              + stream
              + "': column '"
              + name
              + "' has Spark type "
              + t.simpleString()
              + ", which the sink does not encode (it encodes tinyint, smallint, int, bigint,"
              + " float, double, boolean, string, binary, date, timestamp and timestamp_ntz)");
    }
  }

  /**
   * One column as a field (or a key) takes it: its values read and converted by Python's rules, or
   * refused with Python's words.
   */
  static final class Source {
    final String stream;
    final String schemaName;
    final String name;
    final int ordinal;
    final Column column;
    final Kind kind;
    final String avroType;
    Map<UTF8String, Integer> symbols;

    Source(
        String stream,
        String schemaName,
        String name,
        int ordinal,
        Column column,
        Kind kind,
        String avroType) {
      this.stream = stream;
      this.schemaName = schemaName;
      this.name = name;
      this.ordinal = ordinal;
      this.column = column;
      this.kind = kind;
      this.avroType = avroType;
    }

    /** The integer a column of an integer type holds. */
    long integral(InternalRow row) {
      switch (column) {
        case BYTE:
          return row.getByte(ordinal);
        case SHORT:
          return row.getShort(ordinal);
        case INT:
          return row.getInt(ordinal);
        default:
          return row.getLong(ordinal);
      }
    }

    /** The value of a float or double column, as a Python float. */
    double floating(InternalRow row) {
      return column == Column.FLOAT ? (double) row.getFloat(ordinal) : row.getDouble(ordinal);
    }

    /**
     * The integer an {@code int}, {@code long}, {@code timestamp-millis}, {@code timestamp-micros}
     * or {@code date} field writes: Python's {@code _to_int}, {@code _whole}, {@code
     * _to_timestamp_millis}, {@code _to_date}, fastavro's {@code timestamp-micros}.
     */
    long integer(InternalRow row) {
      Column c = column;
      switch (kind) {
        case TIMESTAMP_MILLIS:
          if (c == Column.TIMESTAMP || c == Column.TIMESTAMP_NTZ) {
            return Math.floorDiv(row.getLong(ordinal), 1000L);
          }
          if (c == Column.BOOLEAN || !(c.integer() || c == Column.FLOAT || c == Column.DOUBLE)) {
            throw refused(
                row,
                "a timestamp-millis field takes a datetime (naive: UTC) or epoch milliseconds as"
                    + " an int, not "
                    + c.python);
          }
          return whole(row);
        case TIMESTAMP_MICROS:
          if (c == Column.TIMESTAMP || c == Column.TIMESTAMP_NTZ) {
            return row.getLong(ordinal);
          }
          if (c.integer()) {
            return integral(row);
          }
          if (c == Column.BOOLEAN || c == Column.FLOAT || c == Column.DOUBLE) {
            throw refused(
                row,
                "a timestamp-micros field takes a datetime or epoch microseconds as an int, not "
                    + c.python
                    + " (the JVM sink never truncates one)");
          }
          throw mismatch(row, "an integer is required");
        case DATE:
          if (c == Column.DATE) {
            return row.getInt(ordinal);
          }
          if (c == Column.TIMESTAMP || c == Column.TIMESTAMP_NTZ) {
            throw refused(
                row, "a date field takes a date (or days since 1970-01-01), not a datetime");
          }
          if (!(c.integer() || c == Column.FLOAT || c == Column.DOUBLE)) {
            throw refused(
                row,
                "a date field takes a date or days since 1970-01-01 as an int, not " + c.python);
          }
          return int32(row);
        case INT:
          return int32(row);
        default:
          return whole(row);
      }
    }

    /** Python's {@code _to_int}: {@link #whole}, within 32 bits. */
    private int int32(InternalRow row) {
      if (column == Column.FLOAT || column == Column.DOUBLE) {
        double d = checkedWhole(row);
        if (d < Integer.MIN_VALUE || d > Integer.MAX_VALUE) {
          throw refused(row, Python.integerText(d) + " is outside Avro int's 32 bits " + INT_RANGE);
        }
        return (int) d;
      }
      long v = whole(row);
      if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
        throw refused(row, v + " is outside Avro int's 32 bits " + INT_RANGE);
      }
      return (int) v;
    }

    /** Python's {@code _whole}: an integer, or a float with no fraction. */
    private long whole(InternalRow row) {
      Column c = column;
      if (c.integer()) {
        return integral(row);
      }
      if (c == Column.FLOAT || c == Column.DOUBLE) {
        double d = checkedWhole(row);
        if (d < -0x1p63 || d >= 0x1p63) {
          throw refused(row, Python.integerText(d) + " is outside Avro long's 64 bits");
        }
        return (long) d;
      }
      if (c == Column.BOOLEAN) {
        throw refused(row, "a bool is not an integer; give an int");
      }
      throw refused(row, "an integer field takes an int, not " + c.python);
    }

    private double checkedWhole(InternalRow row) {
      double d = floating(row);
      if (Double.isNaN(d) || Double.isInfinite(d) || d != Math.rint(d)) {
        throw refused(row, FRACTION);
      }
      return d;
    }

    /** A {@code double} or {@code float} field's value: Python's {@code _to_float}. */
    double real(InternalRow row) {
      Column c = column;
      if (c == Column.FLOAT || c == Column.DOUBLE) {
        return floating(row);
      }
      if (c.integer()) {
        return (double) integral(row);
      }
      if (c == Column.BOOLEAN) {
        throw refused(row, "a bool is not a number; give a float");
      }
      throw refused(row, "a floating-point field takes a float or an int, not " + c.python);
    }

    /** A {@code boolean} field's value: Python's {@code _to_bool}. */
    boolean bool(InternalRow row) {
      if (column != Column.BOOLEAN) {
        throw refused(row, "a boolean field takes True or False, not " + column.python);
      }
      return row.getBoolean(ordinal);
    }

    /** A {@code string} field's text. */
    UTF8String string(InternalRow row) {
      if (column != Column.STRING) {
        throw mismatch(row, "must be string");
      }
      return row.getUTF8String(ordinal);
    }

    /** A {@code bytes} field's bytes. */
    byte[] bytes(InternalRow row) {
      if (column != Column.BINARY) {
        throw mismatch(row, "a bytes-like object is required, not '" + column.python + "'");
      }
      return row.getBinary(ordinal);
    }

    /** An {@code enum} field's symbol index. */
    int symbol(InternalRow row) {
      Integer index = column == Column.STRING ? symbols.get(row.getUTF8String(ordinal)) : null;
      if (index == null) {
        throw mismatch(row, repr(row) + " is not in list");
      }
      return index;
    }

    /** Python's {@code repr} of the (non-null) value. */
    String repr(InternalRow row) {
      switch (column) {
        case BYTE:
        case SHORT:
        case INT:
        case LONG:
          return Long.toString(integral(row));
        case FLOAT:
        case DOUBLE:
          return Python.floatRepr(floating(row));
        case BOOLEAN:
          return row.getBoolean(ordinal) ? "True" : "False";
        case STRING:
          return Python.strRepr(row.getUTF8String(ordinal).toString());
        case BINARY:
          return Python.bytesRepr(row.getBinary(ordinal));
        case DATE:
          LocalDate date = LocalDate.ofEpochDay(row.getInt(ordinal));
          return "datetime.date("
              + date.getYear()
              + ", "
              + date.getMonthValue()
              + ", "
              + date.getDayOfMonth()
              + ")";
        default:
          return Python.datetimeRepr(row.getLong(ordinal), column == Column.TIMESTAMP);
      }
    }

    /** {@code normalise}'s refusal: "field 'f' = value (type) is refused: why". */
    TupleRefusedException refused(InternalRow row, String why) {
      return new TupleRefusedException(
          stream,
          name,
          "stream "
              + Python.strRepr(stream)
              + ": field "
              + Python.strRepr(name)
              + " = "
              + Python.shortened(repr(row))
              + " ("
              + column.python
              + ") is refused: "
              + why);
    }

    /** The encoder's refusal (fastavro's in Python): "field 'f' = value does not match ...". */
    TupleRefusedException mismatch(InternalRow row, String why) {
      return mismatch(repr(row), why);
    }

    private TupleRefusedException mismatch(String value, String why) {
      return new TupleRefusedException(
          stream,
          name,
          "stream "
              + Python.strRepr(stream)
              + ": field "
              + Python.strRepr(name)
              + " = "
              + value
              + " does not match schema "
              + Python.strRepr(schemaName)
              + ": "
              + why);
    }

    /** A null (or no column) for a field that is no union with null. */
    TupleRefusedException notNullable() {
      return mismatch(
          "None", "the field's type " + avroType + " takes no null (a union [\"null\", T] does)");
    }
  }

  /** Writes one field's non-null value. */
  abstract static class Field {
    final Source source;
    final int ordinal;

    Field(Source source) {
      this.source = source;
      this.ordinal = source.ordinal;
    }

    abstract void write(InternalRow row, Out out);

    /** The writer of a field from its column: a direct one where no conversion is needed. */
    static Field of(Source s) {
      Column c = s.column;
      switch (s.kind) {
        case INT:
          if (c == Column.INT) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeInt(row.getInt(ordinal));
              }
            };
          }
          break;
        case LONG:
        case TIMESTAMP_MICROS:
          if (c == Column.LONG
              || (s.kind == Kind.TIMESTAMP_MICROS
                  && (c == Column.TIMESTAMP || c == Column.TIMESTAMP_NTZ))) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeLong(row.getLong(ordinal));
              }
            };
          }
          break;
        case TIMESTAMP_MILLIS:
          if (c == Column.TIMESTAMP || c == Column.TIMESTAMP_NTZ) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeLong(Math.floorDiv(row.getLong(ordinal), 1000L));
              }
            };
          }
          break;
        case DATE:
          if (c == Column.DATE) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeInt(row.getInt(ordinal));
              }
            };
          }
          break;
        case DOUBLE:
          if (c == Column.DOUBLE) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeDouble(row.getDouble(ordinal));
              }
            };
          }
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeDouble(source.real(row));
            }
          };
        case FLOAT:
          if (c == Column.FLOAT) {
            return new Field(s) {
              @Override
              void write(InternalRow row, Out out) {
                out.writeFloat(row.getFloat(ordinal));
              }
            };
          }
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeFloat((float) source.real(row));
            }
          };
        case BOOLEAN:
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeBoolean(source.bool(row));
            }
          };
        case STRING:
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeString(source.string(row));
            }
          };
        case BYTES:
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeBytes(source.bytes(row));
            }
          };
        case ENUM:
          return new Field(s) {
            @Override
            void write(InternalRow row, Out out) {
              out.writeInt(source.symbol(row));
            }
          };
        default:
          throw new AssertionError(s.kind);
      }
      // An integer kind from a column that needs converting (or refusing).
      if (s.kind == Kind.INT || s.kind == Kind.DATE) {
        return new Field(s) {
          @Override
          void write(InternalRow row, Out out) {
            out.writeInt((int) source.integer(row));
          }
        };
      }
      return new Field(s) {
        @Override
        void write(InternalRow row, Out out) {
          out.writeLong(source.integer(row));
        }
      };
    }
  }

  /** Appends one key column's text (Python's {@code key_text}) of a row. */
  abstract static class KeyPart {
    /** A key column the row does not have: Python's {@code None}, the empty text. */
    static final KeyPart NOTHING =
        new KeyPart() {
          @Override
          void append(InternalRow row, Out out) {}
        };

    abstract void append(InternalRow row, Out out);

    /** The text of the value of a field of the schema, as {@code normalise} left it. */
    static KeyPart normalised(Source s) {
      if (s.ordinal < 0) {
        return NOTHING;
      }
      switch (s.kind) {
        case INT:
        case LONG:
        case DATE:
        case TIMESTAMP_MILLIS:
          return new KeyPart() {
            @Override
            void append(InternalRow row, Out out) {
              if (!row.isNullAt(s.ordinal)) {
                out.writeDigits(s.integer(row));
              }
            }
          };
        case FLOAT:
        case DOUBLE:
          return new KeyPart() {
            @Override
            void append(InternalRow row, Out out) {
              if (!row.isNullAt(s.ordinal)) {
                out.writeAscii(Python.floatRepr(s.real(row)));
              }
            }
          };
        case BOOLEAN:
          return new KeyPart() {
            @Override
            void append(InternalRow row, Out out) {
              if (!row.isNullAt(s.ordinal)) {
                out.writeAscii(s.bool(row) ? "True" : "False");
              }
            }
          };
        default:
          // string, bytes, enum, timestamp-micros: normalise leaves the value as it is.
          return raw(s);
      }
    }

    /** The text of a column's value as Arrow gives it to Python. */
    static KeyPart raw(Source s) {
      return new KeyPart() {
        @Override
        void append(InternalRow row, Out out) {
          int o = s.ordinal;
          if (row.isNullAt(o)) {
            return;
          }
          switch (s.column) {
            case STRING:
              out.writeRaw(row.getUTF8String(o));
              break;
            case BYTE:
            case SHORT:
            case INT:
            case LONG:
              out.writeDigits(s.integral(row));
              break;
            case DATE:
              out.writeDigits(row.getInt(o));
              break;
            case TIMESTAMP:
            case TIMESTAMP_NTZ:
              out.writeDigits(Math.floorDiv(row.getLong(o), 1000L));
              break;
            case FLOAT:
            case DOUBLE:
              out.writeAscii(Python.floatRepr(s.floating(row)));
              break;
            case BOOLEAN:
              out.writeAscii(row.getBoolean(o) ? "True" : "False");
              break;
            default:
              out.writeAscii(Python.bytesRepr(row.getBinary(o)));
          }
        }
      };
    }
  }

  /**
   * A reused output buffer, written with Avro's binary encoding: {@link BinaryData}'s encoders,
   * those Avro's own buffered {@code BinaryEncoder} writes its buffer with, here with no stream
   * behind the buffer (nothing to flush, one copy out per record).
   */
  static final class Out {
    byte[] buf = new byte[256];
    int pos;

    private void ensure(int n) {
      if (pos + n > buf.length) {
        buf = Arrays.copyOf(buf, Math.max(buf.length * 2, pos + n));
      }
    }

    byte[] toByteArray() {
      return Arrays.copyOf(buf, pos);
    }

    void writeByte(int b) {
      ensure(1);
      buf[pos++] = (byte) b;
    }

    void writeRaw(byte[] bytes) {
      ensure(bytes.length);
      System.arraycopy(bytes, 0, buf, pos, bytes.length);
      pos += bytes.length;
    }

    void writeRaw(UTF8String text) {
      int n = text.numBytes();
      ensure(n);
      text.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + pos);
      pos += n;
    }

    void writeAscii(String text) {
      int n = text.length();
      ensure(n);
      for (int i = 0; i < n; i++) {
        buf[pos++] = (byte) text.charAt(i);
      }
    }

    /** A long's decimal digits, as Python's {@code str} of an int. */
    void writeDigits(long v) {
      if (v == Long.MIN_VALUE) {
        writeAscii("-9223372036854775808");
        return;
      }
      ensure(20);
      if (v < 0) {
        buf[pos++] = '-';
        v = -v;
      }
      int end = pos + digitCount(v);
      int i = end;
      do {
        buf[--i] = (byte) ('0' + v % 10);
        v /= 10;
      } while (v != 0);
      pos = end;
    }

    private static int digitCount(long v) {
      int n = 1;
      for (long p = 10; n < 19 && v >= p; p *= 10) {
        n++;
      }
      return n;
    }

    void writeInt(int v) {
      ensure(5);
      pos += BinaryData.encodeInt(v, buf, pos);
    }

    void writeLong(long v) {
      ensure(10);
      pos += BinaryData.encodeLong(v, buf, pos);
    }

    void writeFloat(float v) {
      ensure(4);
      pos += BinaryData.encodeFloat(v, buf, pos);
    }

    void writeDouble(double v) {
      ensure(8);
      pos += BinaryData.encodeDouble(v, buf, pos);
    }

    void writeBoolean(boolean v) {
      ensure(1);
      pos += BinaryData.encodeBoolean(v, buf, pos);
    }

    /** Avro {@code string}: the length, then the UTF-8 bytes as Spark holds them. */
    void writeString(UTF8String text) {
      writeInt(text.numBytes());
      writeRaw(text);
    }

    /** Avro {@code bytes}: the length, then the bytes. */
    void writeBytes(byte[] bytes) {
      writeInt(bytes.length);
      writeRaw(bytes);
    }
  }

  /** Python's texts of values ({@code str}, {@code repr}), as the Python sink writes them. */
  static final class Python {
    private Python() {}

    /**
     * Python's {@code repr} (and {@code str}) of a float: the shortest decimal that reads back as
     * {@code d} (the nearest of them when several), positional when the decimal exponent is in
     * {@code -4 <= e < 16}, else {@code d.ddde+XX}; {@code nan}, {@code inf}, {@code -inf}; an
     * integral value ends {@code .0} (CPython's {@code float_repr}, {@code 'r'} format).
     */
    static String floatRepr(double d) {
      if (Double.isNaN(d)) {
        return "nan";
      }
      if (Double.isInfinite(d)) {
        return d > 0 ? "inf" : "-inf";
      }
      if (d == 0) {
        return Double.doubleToRawLongBits(d) < 0 ? "-0.0" : "0.0";
      }
      if (Math.abs(d) < 1e16 && d == Math.rint(d)) {
        return (long) d + ".0";
      }
      double a = Math.abs(d);
      BigDecimal exact = new BigDecimal(a);
      BigDecimal shortest = null;
      for (int p = 1; p <= 17 && shortest == null; p++) {
        BigDecimal near = exact.round(new MathContext(p, RoundingMode.HALF_EVEN));
        if (near.doubleValue() == a) {
          shortest = near;
        } else {
          RoundingMode away = near.compareTo(exact) > 0 ? RoundingMode.DOWN : RoundingMode.UP;
          BigDecimal other = exact.round(new MathContext(p, away));
          if (other.doubleValue() == a) {
            shortest = other;
          }
        }
      }
      BigDecimal s = shortest.stripTrailingZeros();
      String digits = s.unscaledValue().toString();
      int n = digits.length();
      int point = n - s.scale(); // d = 0.digits * 10^point
      StringBuilder out = new StringBuilder(24);
      if (d < 0) {
        out.append('-');
      }
      if (point <= -4 || point > 16) {
        out.append(digits.charAt(0));
        if (n > 1) {
          out.append('.').append(digits, 1, n);
        }
        int e = point - 1;
        out.append(e < 0 ? "e-" : "e+");
        if (Math.abs(e) < 10) {
          out.append('0');
        }
        out.append(Math.abs(e));
      } else if (point <= 0) {
        out.append("0.");
        out.append("0".repeat(-point));
        out.append(digits);
      } else if (point >= n) {
        out.append(digits).append("0".repeat(point - n)).append(".0");
      } else {
        out.append(digits, 0, point).append('.').append(digits, point, n);
      }
      return out.toString();
    }

    /** The digits of the integer a whole double is (Python's {@code int(d)}). */
    static String integerText(double whole) {
      return new BigDecimal(whole).toBigInteger().toString();
    }

    /** Python's {@code repr} of bytes: {@code b'...'}. */
    static String bytesRepr(byte[] bytes) {
      boolean single = false;
      boolean dbl = false;
      for (byte b : bytes) {
        single |= b == '\'';
        dbl |= b == '"';
      }
      char quote = single && !dbl ? '"' : '\'';
      StringBuilder out = new StringBuilder(bytes.length + 3).append('b').append(quote);
      for (byte b : bytes) {
        int c = b & 0xFF;
        if (c == quote || c == '\\') {
          out.append('\\').append((char) c);
        } else if (c == '\t') {
          out.append("\\t");
        } else if (c == '\n') {
          out.append("\\n");
        } else if (c == '\r') {
          out.append("\\r");
        } else if (c < 0x20 || c >= 0x7F) {
          out.append(String.format("\\x%02x", c));
        } else {
          out.append((char) c);
        }
      }
      return out.append(quote).toString();
    }

    /** Python's {@code repr} of a str (non-printable characters escaped as Python does). */
    static String strRepr(String text) {
      boolean single = text.indexOf('\'') >= 0;
      boolean dbl = text.indexOf('"') >= 0;
      char quote = single && !dbl ? '"' : '\'';
      StringBuilder out = new StringBuilder(text.length() + 2).append(quote);
      text.codePoints()
          .forEach(
              c -> {
                if (c == quote || c == '\\') {
                  out.append('\\').appendCodePoint(c);
                } else if (c == '\t') {
                  out.append("\\t");
                } else if (c == '\n') {
                  out.append("\\n");
                } else if (c == '\r') {
                  out.append("\\r");
                } else if (c < 0x20 || c == 0x7F) {
                  out.append(String.format("\\x%02x", c));
                } else if (c > 0x7F && !printable(c)) {
                  out.append(
                      c <= 0xFF
                          ? String.format("\\x%02x", c)
                          : c <= 0xFFFF
                              ? String.format("\\u%04x", c)
                              : String.format("\\U%08x", c));
                } else {
                  out.appendCodePoint(c);
                }
              });
      return out.append(quote).toString();
    }

    private static boolean printable(int c) {
      switch (Character.getType(c)) {
        case Character.CONTROL:
        case Character.FORMAT:
        case Character.PRIVATE_USE:
        case Character.SURROGATE:
        case Character.UNASSIGNED:
        case Character.LINE_SEPARATOR:
        case Character.PARAGRAPH_SEPARATOR:
        case Character.SPACE_SEPARATOR:
          return false;
        default:
          return true;
      }
    }

    /** {@code repr} of a {@code datetime} from epoch microseconds (the time zone as UTC). */
    static String datetimeRepr(long micros, boolean zoned) {
      LocalDateTime t =
          LocalDateTime.ofEpochSecond(
              Math.floorDiv(micros, 1_000_000L),
              (int) Math.floorMod(micros, 1_000_000L) * 1000,
              ZoneOffset.UTC);
      List<Integer> parts = new ArrayList<>();
      parts.addAll(
          List.of(t.getYear(), t.getMonthValue(), t.getDayOfMonth(), t.getHour(), t.getMinute()));
      int micro = t.getNano() / 1000;
      if (t.getSecond() != 0 || micro != 0) {
        parts.add(t.getSecond());
      }
      if (micro != 0) {
        parts.add(micro);
      }
      StringBuilder out = new StringBuilder("datetime.datetime(");
      for (int i = 0; i < parts.size(); i++) {
        out.append(i > 0 ? ", " : "").append(parts.get(i));
      }
      return out.append(zoned ? ", tzinfo=UTC)" : ")").toString();
    }

    /** Python's {@code _short}: a {@code repr} cut to 80 characters. */
    static String shortened(String repr) {
      int count = repr.codePointCount(0, repr.length());
      if (count <= 80) {
        return repr;
      }
      return repr.substring(0, repr.offsetByCodePoints(0, 77)) + "...";
    }
  }
}
