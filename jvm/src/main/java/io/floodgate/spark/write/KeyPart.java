package io.floodgate.spark.write;

import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Appends one key column's text of a row (Python's {@code TupleKey}/{@code key_text}) to the record
 * key, which {@link TupleEncoder#key} joins with {@code |}: from the normalised value when every
 * key column is a field of the schema ({@link #normalised}), else from the row as it is ({@link
 * #raw}); a key column the rows lack is the empty text ({@link #NOTHING}). A normalised part throws
 * {@link TupleRefusedException} as its field does.
 */
abstract class KeyPart {
  /** A key column the row does not have: Python's {@code None}, the empty text. */
  static final KeyPart NOTHING =
      new KeyPart() {
        @Override
        void append(InternalRow row, AvroOut out) {}
      };

  abstract void append(InternalRow row, AvroOut out);

  /** The text of the value of a field of the schema, as {@code normalise} left it. */
  static KeyPart normalised(FieldSource s) {
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
          void append(InternalRow row, AvroOut out) {
            if (!row.isNullAt(s.ordinal)) {
              out.writeDigits(s.integer(row));
            }
          }
        };
      case FLOAT:
      case DOUBLE:
        return new KeyPart() {
          @Override
          void append(InternalRow row, AvroOut out) {
            if (!row.isNullAt(s.ordinal)) {
              out.writeAscii(PythonText.floatRepr(s.real(row)));
            }
          }
        };
      case BOOLEAN:
        return new KeyPart() {
          @Override
          void append(InternalRow row, AvroOut out) {
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
  static KeyPart raw(FieldSource s) {
    return new KeyPart() {
      @Override
      void append(InternalRow row, AvroOut out) {
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
            out.writeAscii(PythonText.floatRepr(s.floating(row)));
            break;
          case BOOLEAN:
            out.writeAscii(row.getBoolean(o) ? "True" : "False");
            break;
          default:
            out.writeAscii(PythonText.bytesRepr(row.getBinary(o)));
        }
      }
    };
  }
}
