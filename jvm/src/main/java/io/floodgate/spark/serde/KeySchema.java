package io.floodgate.spark.serde;

import java.util.ArrayList;
import java.util.List;
import org.apache.avro.Schema;

/**
 * The Avro schema of a stream's Confluent-encoded key ({@code keyEncoding = confluent}): a record
 * named {@code <the stream record's name>Key}, in the stream record's namespace, whose fields are
 * the stream schema's fields named by {@code keyFields}, in that order, each as the stream's schema
 * declares it. The same schema as {@code pipeline.serde.confluent.key_schema} makes in Python, so a
 * key encoded with it resolves here.
 */
public final class KeySchema {
  private KeySchema() {}

  /**
   * @param stream the stream's name (for errors)
   * @param schema the stream's Avro record schema
   * @param fields the key fields, in order
   * @return the key record's schema
   * @throws IllegalArgumentException no key fields, or one that is no field of {@code schema}
   */
  public static Schema of(String stream, Schema schema, List<String> fields) {
    List<String> missing = new ArrayList<>();
    List<Schema.Field> kept = new ArrayList<>();
    if (fields != null) {
      for (String name : fields) {
        Schema.Field field = schema.getField(name);
        if (field == null) {
          missing.add(name);
        } else {
          kept.add(new Schema.Field(field, field.schema()));
        }
      }
    }
    if (kept.isEmpty() || !missing.isEmpty()) {
      List<String> names = schema.getFields().stream().map(Schema.Field::name).toList();
      throw new IllegalArgumentException(
          "stream '"
              + stream
              + "': a Confluent key needs key fields of schema "
              + schema.getFullName()
              + "; given "
              + fields
              + ", not fields: "
              + missing
              + "; its fields: "
              + names);
    }
    Schema key = Schema.createRecord(schema.getName() + "Key", null, schema.getNamespace(), false);
    key.setFields(kept);
    return key;
  }
}
