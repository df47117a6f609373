package io.floodgate.spark.write;

import java.time.LocalDate;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One column as a field (or a key) takes it: its values read and converted by Python's rules, or
 * refused with Python's words.
 */
final class FieldSource {
  /** The range of an Avro {@code int}. */
  static final String INT_RANGE = "(-2147483648..2147483647)";

  static final String FRACTION =
      "an integer field takes an int, or a float with no fraction (1545.0); it is never truncated";

  final String stream;
  final String schemaName;
  final String name;
  final int ordinal;
  final SparkColumn column;
  final AvroKind kind;
  final String avroType;
  Map<UTF8String, Integer> symbols;

  FieldSource(
      String stream,
      String schemaName,
      String name,
      int ordinal,
      SparkColumn column,
      AvroKind kind,
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
    return column == SparkColumn.FLOAT ? (double) row.getFloat(ordinal) : row.getDouble(ordinal);
  }

  /**
   * The integer an {@code int}, {@code long}, {@code timestamp-millis}, {@code timestamp-micros} or
   * {@code date} field writes: Python's {@code _to_int}, {@code _whole}, {@code
   * _to_timestamp_millis}, {@code _to_date}, fastavro's {@code timestamp-micros}.
   */
  long integer(InternalRow row) {
    SparkColumn c = column;
    switch (kind) {
      case TIMESTAMP_MILLIS:
        if (c == SparkColumn.TIMESTAMP || c == SparkColumn.TIMESTAMP_NTZ) {
          return Math.floorDiv(row.getLong(ordinal), 1000L);
        }
        if (c == SparkColumn.BOOLEAN
            || !(c.integer() || c == SparkColumn.FLOAT || c == SparkColumn.DOUBLE)) {
          throw refused(
              row,
              "a timestamp-millis field takes a datetime (naive: UTC) or epoch milliseconds as"
                  + " an int, not "
                  + c.python);
        }
        return whole(row);
      case TIMESTAMP_MICROS:
        if (c == SparkColumn.TIMESTAMP || c == SparkColumn.TIMESTAMP_NTZ) {
          return row.getLong(ordinal);
        }
        if (c.integer()) {
          return integral(row);
        }
        if (c == SparkColumn.BOOLEAN || c == SparkColumn.FLOAT || c == SparkColumn.DOUBLE) {
          throw refused(
              row,
              "a timestamp-micros field takes a datetime or epoch microseconds as an int, not "
                  + c.python
                  + " (the JVM sink never truncates one)");
        }
        throw mismatch(row, "an integer is required");
      case DATE:
        if (c == SparkColumn.DATE) {
          return row.getInt(ordinal);
        }
        if (c == SparkColumn.TIMESTAMP || c == SparkColumn.TIMESTAMP_NTZ) {
          throw refused(
              row, "a date field takes a date (or days since 1970-01-01), not a datetime");
        }
        if (!(c.integer() || c == SparkColumn.FLOAT || c == SparkColumn.DOUBLE)) {
          throw refused(
              row, "a date field takes a date or days since 1970-01-01 as an int, not " + c.python);
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
    if (column == SparkColumn.FLOAT || column == SparkColumn.DOUBLE) {
      double d = checkedWhole(row);
      if (d < Integer.MIN_VALUE || d > Integer.MAX_VALUE) {
        throw refused(
            row, PythonText.integerText(d) + " is outside Avro int's 32 bits " + INT_RANGE);
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
    SparkColumn c = column;
    if (c.integer()) {
      return integral(row);
    }
    if (c == SparkColumn.FLOAT || c == SparkColumn.DOUBLE) {
      double d = checkedWhole(row);
      if (d < -0x1p63 || d >= 0x1p63) {
        throw refused(row, PythonText.integerText(d) + " is outside Avro long's 64 bits");
      }
      return (long) d;
    }
    if (c == SparkColumn.BOOLEAN) {
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
    SparkColumn c = column;
    if (c == SparkColumn.FLOAT || c == SparkColumn.DOUBLE) {
      return floating(row);
    }
    if (c.integer()) {
      return (double) integral(row);
    }
    if (c == SparkColumn.BOOLEAN) {
      throw refused(row, "a bool is not a number; give a float");
    }
    throw refused(row, "a floating-point field takes a float or an int, not " + c.python);
  }

  /** A {@code boolean} field's value: Python's {@code _to_bool}. */
  boolean bool(InternalRow row) {
    if (column != SparkColumn.BOOLEAN) {
      throw refused(row, "a boolean field takes True or False, not " + column.python);
    }
    return row.getBoolean(ordinal);
  }

  /** A {@code string} field's text. */
  UTF8String string(InternalRow row) {
    if (column != SparkColumn.STRING) {
      throw mismatch(row, "must be string");
    }
    return row.getUTF8String(ordinal);
  }

  /** A {@code bytes} field's bytes. */
  byte[] bytes(InternalRow row) {
    if (column != SparkColumn.BINARY) {
      throw mismatch(row, "a bytes-like object is required, not '" + column.python + "'");
    }
    return row.getBinary(ordinal);
  }

  /** An {@code enum} field's symbol index. */
  int symbol(InternalRow row) {
    Integer index = column == SparkColumn.STRING ? symbols.get(row.getUTF8String(ordinal)) : null;
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
        return PythonText.floatRepr(floating(row));
      case BOOLEAN:
        return row.getBoolean(ordinal) ? "True" : "False";
      case STRING:
        return PythonText.strRepr(row.getUTF8String(ordinal).toString());
      case BINARY:
        return PythonText.bytesRepr(row.getBinary(ordinal));
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
        return PythonText.datetimeRepr(row.getLong(ordinal), column == SparkColumn.TIMESTAMP);
    }
  }

  /** {@code normalise}'s refusal: "field 'f' = value (type) is refused: why". */
  TupleRefusedException refused(InternalRow row, String why) {
    return new TupleRefusedException(
        stream,
        name,
        valueText(PythonText.shortened(repr(row))) + " (" + column.python + ") is refused: " + why);
  }

  /** The encoder's refusal (fastavro's in Python): "field 'f' = value does not match ...". */
  TupleRefusedException mismatch(InternalRow row, String why) {
    return mismatch(repr(row), why);
  }

  private TupleRefusedException mismatch(String value, String why) {
    return new TupleRefusedException(
        stream,
        name,
        valueText(value) + " does not match schema " + PythonText.strRepr(schemaName) + ": " + why);
  }

  /** The start both refusals share: "stream 's': field 'f' = value". */
  private String valueText(String value) {
    return "stream "
        + PythonText.strRepr(stream)
        + ": field "
        + PythonText.strRepr(name)
        + " = "
        + value;
  }

  /** A null (or no column) for a field that is no union with null. */
  TupleRefusedException notNullable() {
    return mismatch(
        "None", "the field's type " + avroType + " takes no null (a union [\"null\", T] does)");
  }
}
