package io.floodgate.spark.write;

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
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A Spark column's type, with the name of the Python type Arrow gives its values ({@code
 * DataFrame.toArrow().to_pylist()}), which the encoder's refusals name as Python's do. A column of
 * another type is refused when the encoder is built ({@link #of}: an {@link
 * IllegalArgumentException} naming the stream, the column and the types the sink encodes).
 */
enum SparkColumn {
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

  SparkColumn(String python) {
    this.python = python;
  }

  boolean integer() {
    return this == BYTE || this == SHORT || this == INT || this == LONG;
  }

  static SparkColumn of(String stream, String name, StructField field) {
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
