package io.floodgate.spark.serde;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.avro.LogicalType;
import org.apache.avro.Schema;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A stream's Avro schema as the Spark columns the source reads, those a query group's SQL is
 * written against ({@code docs/reference/spark-kafka-options.md}, "Columns").
 *
 * <p>Without a schema: Spark's Kafka source columns exactly ({@code key, value, topic, partition,
 * offset, timestamp, timestampType}, then {@code headers} with {@code includeHeaders}). With one:
 * the record's fields in order, then {@code event_time, _key, _partition, _offset, _timestamp},
 * then Spark's Kafka columns but those a field of the stream takes.
 */
public final class StreamSchema {
  /** Columns the source adds to every decoded stream's own fields. */
  public static final List<String> METADATA_COLUMNS =
      List.of("event_time", "_key", "_partition", "_offset", "_timestamp");

  private static final Map<Schema.Type, DataType> AVRO_TO_SPARK =
      Map.of(
          Schema.Type.INT, DataTypes.IntegerType,
          Schema.Type.LONG, DataTypes.LongType,
          Schema.Type.FLOAT, DataTypes.FloatType,
          Schema.Type.DOUBLE, DataTypes.DoubleType,
          Schema.Type.BOOLEAN, DataTypes.BooleanType,
          Schema.Type.STRING, DataTypes.StringType,
          Schema.Type.BYTES, DataTypes.BinaryType,
          Schema.Type.ENUM, DataTypes.StringType);

  private static final Map<String, DataType> LOGICAL_TO_SPARK =
      Map.of(
          "timestamp-millis", DataTypes.TimestampType,
          "timestamp-micros", DataTypes.TimestampType,
          "date", DataTypes.DateType);

  private StreamSchema() {}

  /** Spark's Kafka source columns, every one nullable; {@code headers} last when asked. */
  public static List<StructField> kafkaColumns(boolean includeHeaders) {
    List<StructField> fields = new ArrayList<>();
    fields.add(field("key", DataTypes.BinaryType, true));
    fields.add(field("value", DataTypes.BinaryType, true));
    fields.add(field("topic", DataTypes.StringType, true));
    fields.add(field("partition", DataTypes.IntegerType, true));
    fields.add(field("offset", DataTypes.LongType, true));
    fields.add(field("timestamp", DataTypes.TimestampType, true));
    fields.add(field("timestampType", DataTypes.IntegerType, true));
    if (includeHeaders) {
      StructType header =
          new StructType(
              new StructField[] {
                field("key", DataTypes.StringType, true), field("value", DataTypes.BinaryType, true)
              });
      fields.add(field("headers", new ArrayType(header, true), true));
    }
    return fields;
  }

  /**
   * The Spark schema of a stream read by the source.
   *
   * @param stream the stream's name (for errors)
   * @param schema the stream's Avro record schema; {@code null} when nothing is decoded
   * @param includeHeaders option {@code includeHeaders}
   * @param decoded the fields read ({@code null}: all): the schema has a column for these fields
   *     only, so a query that names another fails its analysis naming it
   * @throws IllegalArgumentException a field's Avro type has no Spark column here, or a field
   *     clashes with a metadata column
   */
  public static StructType of(
      String stream, Schema schema, boolean includeHeaders, List<String> decoded) {
    return of(stream, schema, includeHeaders, decoded, null);
  }

  /**
   * The Spark schema of a stream read by the source, with its key in the Confluent wire format.
   *
   * @param keySchema the key record's schema ({@link KeySchema}) of {@code keyEncoding =
   *     confluent}: the {@code key} column is then {@link #keyStruct}, not binary ({@code _key}
   *     stays the key's bytes); {@code null}: a binary key
   * @see #of(String, Schema, boolean, List)
   */
  public static StructType of(
      String stream,
      Schema schema,
      boolean includeHeaders,
      List<String> decoded,
      Schema keySchema) {
    if (schema == null) {
      return new StructType(kafkaColumns(includeHeaders).toArray(new StructField[0]));
    }
    List<StructField> fields = new ArrayList<>();
    Set<String> names = new HashSet<>();
    for (Schema.Field f : schema.getFields()) {
      StructField column = sparkField(stream, f);
      if (decoded == null || decoded.contains(f.name())) {
        fields.add(column);
      }
      names.add(f.name());
    }
    Set<String> clash = new TreeSet<>(names);
    clash.retainAll(METADATA_COLUMNS);
    if (!clash.isEmpty()) {
      throw new IllegalArgumentException(
          "stream '" + stream + "': fields " + clash + " clash with the source's metadata columns");
    }
    fields.add(field("event_time", DataTypes.TimestampType, true));
    fields.add(field("_key", DataTypes.BinaryType, true));
    fields.add(field("_partition", DataTypes.IntegerType, false));
    fields.add(field("_offset", DataTypes.LongType, false));
    fields.add(field("_timestamp", DataTypes.TimestampType, true));
    for (StructField f : kafkaColumns(includeHeaders)) {
      if (!names.contains(f.name())) {
        fields.add(
            f.name().equals("key") && keySchema != null
                ? field("key", keyStruct(stream, keySchema), true)
                : f);
      }
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  /**
   * Checks option {@code fields} against the stream's record: every name must be one of its fields
   * (case-sensitive, as Avro's names are). A misspelled name would otherwise leave out the field
   * meant, and the query reading it would fail on a column the user thinks is there.
   *
   * @param stream the stream's name (for errors)
   * @param schema the stream's Avro record schema
   * @param fields option {@code fields}
   * @throws IllegalArgumentException a name is no field of the record: the message names it and
   *     lists the record's fields
   */
  public static void requireFields(String stream, Schema schema, List<String> fields) {
    List<String> known = new ArrayList<>();
    schema.getFields().forEach(f -> known.add(f.name()));
    List<String> unknown = new ArrayList<>(fields);
    unknown.removeAll(known);
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException(
          "stream '"
              + stream
              + "': option 'fields' names "
              + unknown
              + ", which its record does not have; its fields: "
              + String.join(", ", known));
    }
  }

  /**
   * The {@code key} column of a Confluent-encoded key: a struct of the key record's fields, each
   * typed as the same field of the stream's columns.
   *
   * @throws IllegalArgumentException a key field's Avro type has no Spark column here
   */
  public static StructType keyStruct(String stream, Schema keySchema) {
    List<StructField> fields = new ArrayList<>();
    for (Schema.Field f : keySchema.getFields()) {
      fields.add(sparkField(stream, f));
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  /** The one non-null branch of {@code ["null", T]}, or the schema itself. */
  public static Schema nonNull(Schema schema) {
    if (schema.getType() != Schema.Type.UNION) {
      return schema;
    }
    for (Schema branch : schema.getTypes()) {
      if (branch.getType() != Schema.Type.NULL) {
        return branch;
      }
    }
    return schema;
  }

  private static StructField sparkField(String stream, Schema.Field avroField) {
    Schema type = avroField.schema();
    boolean nullable = false;
    if (type.getType() == Schema.Type.UNION) {
      List<Schema> branches = new ArrayList<>();
      for (Schema branch : type.getTypes()) {
        if (branch.getType() != Schema.Type.NULL) {
          branches.add(branch);
        }
      }
      nullable = branches.size() < type.getTypes().size();
      if (branches.size() != 1) {
        throw new IllegalArgumentException(
            "stream '"
                + stream
                + "': field '"
                + avroField.name()
                + "' is a union of "
                + type
                + "; the source supports only [\"null\", T]");
      }
      type = branches.get(0);
    }
    LogicalType logical = type.getLogicalType();
    String logicalName = logical != null ? logical.getName() : type.getProp("logicalType");
    if (logicalName != null && LOGICAL_TO_SPARK.containsKey(logicalName)) {
      return field(avroField.name(), LOGICAL_TO_SPARK.get(logicalName), nullable);
    }
    DataType spark = AVRO_TO_SPARK.get(type.getType());
    if (spark == null) {
      throw new IllegalArgumentException(
          "stream '"
              + stream
              + "': field '"
              + avroField.name()
              + "' has Avro type "
              + type
              + ", which the source does not map to a Spark column");
    }
    return field(avroField.name(), spark, nullable);
  }

  private static StructField field(String name, DataType type, boolean nullable) {
    return new StructField(name, type, nullable, Metadata.empty());
  }
}
