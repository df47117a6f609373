package io.floodgate.spark.read;

import io.floodgate.spark.options.SourceOptions;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Where each column of the source's rows comes from: a field of the stream's Avro record, decoded,
 * or the Kafka record (metadata and Spark's Kafka columns).
 *
 * <p>Every field column of the scan's schema is decoded: the schema holds only the fields read
 * (option {@code fields} shapes the table's schema; a batch scan is pruned further by Spark's
 * {@code V2ScanRelationPushDown}), so no column is ever left null for want of decoding. A column of
 * a field outside {@code fields} is refused by name, as Spark refuses a column it cannot resolve.
 */
public final class RowLayout implements Serializable {
  private static final long serialVersionUID = 1L;

  /** What fills a column. */
  public enum Column {
    FIELD,
    EVENT_TIME,
    KEY,
    /** The {@code key} column of {@code keyEncoding = confluent}: the key record, decoded. */
    DECODED_KEY,
    PARTITION,
    OFFSET,
    TIMESTAMP,
    VALUE,
    TOPIC,
    TIMESTAMP_TYPE,
    HEADERS
  }

  final Column[] columns;

  /** The decoded fields, in schema order, and their ordinals. */
  final List<String> decodedFields = new ArrayList<>();

  final int[] decodedOrdinals;

  /** Ordinal of {@code timestampField} and whether its column is a Spark timestamp (micros). */
  final int timestampFieldOrdinal;

  final boolean timestampFieldIsMicros;

  /**
   * @param schema the rows' Spark schema: the scan's read schema (the table's, {@code
   *     StreamSchema.of}, or fewer columns)
   * @param avro the stream's Avro schema, {@code null} when nothing is decoded
   * @param options the source's options ({@code fields}, {@code timestampField})
   * @throws IllegalArgumentException a column is a field of the stream outside option {@code
   *     fields} (it would read null in every row), or a column the source has no value for
   */
  public RowLayout(StructType schema, Schema avro, SourceOptions options) {
    StructField[] fields = schema.fields();
    columns = new Column[fields.length];
    List<Integer> ordinals = new ArrayList<>();
    List<String> avroNames = new ArrayList<>();
    if (avro != null) {
      avro.getFields().forEach(f -> avroNames.add(f.name()));
    }
    int tsOrdinal = -1;
    boolean tsMicros = false;
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      if (avroNames.contains(name)) {
        boolean read =
            options.fields == null
                || options.fields.contains(name)
                || name.equals(options.timestampField);
        if (!read) {
          throw new IllegalArgumentException(
              "stream '"
                  + options.stream
                  + "': column '"
                  + name
                  + "' is read, but option 'fields' does not name it (fields: "
                  + String.join(", ", options.fields)
                  + ")");
        }
        columns[i] = Column.FIELD;
        decodedFields.add(name);
        ordinals.add(i);
        if (name.equals(options.timestampField)) {
          tsOrdinal = i;
          tsMicros = fields[i].dataType().equals(DataTypes.TimestampType);
        }
        continue;
      }
      if (name.equals("key") && fields[i].dataType() instanceof StructType) {
        columns[i] = Column.DECODED_KEY;
        continue;
      }
      columns[i] =
          switch (name) {
            case "event_time" -> Column.EVENT_TIME;
            case "_key", "key" -> Column.KEY;
            case "_partition", "partition" -> Column.PARTITION;
            case "_offset", "offset" -> Column.OFFSET;
            case "_timestamp", "timestamp" -> Column.TIMESTAMP;
            case "value" -> Column.VALUE;
            case "topic" -> Column.TOPIC;
            case "timestampType" -> Column.TIMESTAMP_TYPE;
            case "headers" -> Column.HEADERS;
            default -> throw new IllegalArgumentException("no source of column " + name);
          };
    }
    decodedOrdinals = ordinals.stream().mapToInt(Integer::intValue).toArray();
    timestampFieldOrdinal = tsOrdinal;
    timestampFieldIsMicros = tsMicros;
  }

  /** Whether the rows have a {@link Column#DECODED_KEY} column. */
  boolean decodesKey() {
    for (Column column : columns) {
      if (column == Column.DECODED_KEY) {
        return true;
      }
    }
    return false;
  }

  static boolean isTimestamp(DataType type) {
    return type.equals(DataTypes.TimestampType);
  }
}
