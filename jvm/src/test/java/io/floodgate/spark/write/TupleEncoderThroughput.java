package io.floodgate.spark.write;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * How many flight rows ({@code schemas/flight.avsc}, keyed by carrier and flight) one thread
 * encodes a second, key and value, from Spark's {@link UnsafeRow} and from a {@link
 * GenericInternalRow}. Measures only, asserts nothing; run when asked: {@code mvn test
 * -Dtest=TupleEncoderThroughput -Dfloodgate.bench=true}.
 */
@EnabledIfSystemProperty(named = "floodgate.bench", matches = "true")
class TupleEncoderThroughput {
  static final String[] INTS = {
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "arr_delay"
  };

  @Test
  void flightRowsPerSecond() throws IOException {
    Path base = Path.of(System.getProperty("basedir", System.getProperty("user.dir")));
    Schema schema =
        new Schema.Parser().parse(Files.readString(base.resolve("../schemas/flight.avsc")));
    StructField[] fields = new StructField[schema.getFields().size()];
    for (Schema.Field f : schema.getFields()) {
      String name = f.name();
      fields[f.pos()] =
          new StructField(
              name,
              switch (name) {
                case "carrier", "tailnum", "origin", "dest" -> DataTypes.StringType;
                case "time_hour" -> DataTypes.TimestampType;
                default -> DataTypes.IntegerType;
              },
              true,
              Metadata.empty());
    }
    StructType rowType = new StructType(fields);
    TupleEncoder encoder =
        TupleEncoder.singleObject("flights", rowType, schema, List.of("carrier", "flight"));
    Object[] values = {
      2013,
      1,
      1,
      517,
      515,
      2,
      830,
      819,
      11,
      UTF8String.fromString("UA"),
      1545,
      UTF8String.fromString("N14228"),
      UTF8String.fromString("EWR"),
      UTF8String.fromString("IAH"),
      227,
      1400,
      5,
      15,
      1_357_034_400_000_000L
    };
    UnsafeRowWriter writer = new UnsafeRowWriter(values.length, 64);
    writer.resetRowWriter();
    for (int i = 0; i < values.length; i++) {
      if (values[i] instanceof Integer v) {
        writer.write(i, (int) v);
      } else if (values[i] instanceof Long v) {
        writer.write(i, (long) v);
      } else {
        writer.write(i, (UTF8String) values[i]);
      }
    }
    measure("UnsafeRow", encoder, writer.getRow());
    measure("GenericInternalRow", encoder, new GenericInternalRow(values));
  }

  private static void measure(String kind, TupleEncoder encoder, InternalRow row) {
    long sink = 0;
    for (int round = 0; round < 5; round++) {
      int n = 5_000_000;
      long start = System.nanoTime();
      for (int i = 0; i < n; i++) {
        sink += encoder.value(row).length + encoder.key(row).length;
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      System.out.printf("%s: %.2f M rows/s (round %d)%n", kind, n / seconds / 1e6, round);
    }
    System.out.println(kind + " bytes written: " + sink);
  }
}
