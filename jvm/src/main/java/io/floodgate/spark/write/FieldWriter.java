package io.floodgate.spark.write;

import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Writes one field's non-null value in Avro's binary encoding (Avro specification, "Binary
 * Encoding") to an {@link AvroOut}: a direct writer where the column's type is the field's, else
 * one that converts the value by Python's rules through its {@link FieldSource} ({@link #of}).
 * Writing throws {@link TupleRefusedException} for a value the field does not take.
 */
abstract class FieldWriter {
  final FieldSource source;
  final int ordinal;

  FieldWriter(FieldSource source) {
    this.source = source;
    this.ordinal = source.ordinal;
  }

  abstract void write(InternalRow row, AvroOut out);

  /** The writer of a field from its column: a direct one where no conversion is needed. */
  static FieldWriter of(FieldSource s) {
    SparkColumn c = s.column;
    switch (s.kind) {
      case INT:
        if (c == SparkColumn.INT) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeInt(row.getInt(ordinal));
            }
          };
        }
        break;
      case LONG:
      case TIMESTAMP_MICROS:
        if (c == SparkColumn.LONG
            || (s.kind == AvroKind.TIMESTAMP_MICROS
                && (c == SparkColumn.TIMESTAMP || c == SparkColumn.TIMESTAMP_NTZ))) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeLong(row.getLong(ordinal));
            }
          };
        }
        break;
      case TIMESTAMP_MILLIS:
        if (c == SparkColumn.TIMESTAMP || c == SparkColumn.TIMESTAMP_NTZ) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeLong(Math.floorDiv(row.getLong(ordinal), 1000L));
            }
          };
        }
        break;
      case DATE:
        if (c == SparkColumn.DATE) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeInt(row.getInt(ordinal));
            }
          };
        }
        break;
      case DOUBLE:
        if (c == SparkColumn.DOUBLE) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeDouble(row.getDouble(ordinal));
            }
          };
        }
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeDouble(source.real(row));
          }
        };
      case FLOAT:
        if (c == SparkColumn.FLOAT) {
          return new FieldWriter(s) {
            @Override
            void write(InternalRow row, AvroOut out) {
              out.writeFloat(row.getFloat(ordinal));
            }
          };
        }
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeFloat((float) source.real(row));
          }
        };
      case BOOLEAN:
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeBoolean(source.bool(row));
          }
        };
      case STRING:
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeString(source.string(row));
          }
        };
      case BYTES:
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeBytes(source.bytes(row));
          }
        };
      case ENUM:
        return new FieldWriter(s) {
          @Override
          void write(InternalRow row, AvroOut out) {
            out.writeInt(source.symbol(row));
          }
        };
      default:
        throw new AssertionError(s.kind);
    }
    // An integer kind from a column that needs converting (or refusing).
    if (s.kind == AvroKind.INT || s.kind == AvroKind.DATE) {
      return new FieldWriter(s) {
        @Override
        void write(InternalRow row, AvroOut out) {
          out.writeInt((int) source.integer(row));
        }
      };
    }
    return new FieldWriter(s) {
      @Override
      void write(InternalRow row, AvroOut out) {
        out.writeLong(source.integer(row));
      }
    };
  }
}
