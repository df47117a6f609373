package io.floodgate.spark.write;

import org.apache.avro.Schema;

/**
 * What an Avro field holds, as the rules of {@link TupleEncoder}'s description tell them apart: a
 * primitive type ({@code int}, {@code long}, {@code float}, {@code double}, {@code boolean}, {@code
 * string}, {@code bytes}), an {@code enum}, or a logical type ({@code timestamp-millis}, {@code
 * timestamp-micros}, {@code date}); of a nullable field, its non-null branch. Any other type is
 * refused when the encoder is built ({@link #of}: an {@link IllegalArgumentException} naming the
 * stream, the field and the types the sink writes).
 */
enum AvroKind {
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

  static AvroKind of(String stream, String field, Schema type) {
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
