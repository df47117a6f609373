package io.floodgate.spark.serde;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;

/**
 * The Avro schemas of option {@code schemas} ({@code {name: schema}}, as a query group writes it
 * with {@code pipeline.serde.schemas.SchemaRepository.as_json}), by name and by CRC-64-AVRO
 * fingerprint, the 8 bytes after the marker of Avro's single-object encoding.
 */
public final class SchemaRepository {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Map<String, Schema> byName = new LinkedHashMap<>();
  private final Map<Long, Schema> byFingerprint = new HashMap<>();
  private final Map<Long, String> namesByFingerprint = new HashMap<>();

  /**
   * @param json {@code {name: schema}}
   * @throws IllegalArgumentException not that JSON, or a schema that does not parse (named)
   */
  public SchemaRepository(String json) {
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException("floodgate_kafka: option 'schemas' is not JSON", e);
    }
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException(
          "floodgate_kafka: option 'schemas' is not a JSON object of schemas by name");
    }
    Iterator<Map.Entry<String, JsonNode>> entries = root.fields();
    while (entries.hasNext()) {
      Map.Entry<String, JsonNode> entry = entries.next();
      Schema schema;
      try {
        schema = new Schema.Parser().parse(entry.getValue().toString());
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(
            "schema '" + entry.getKey() + "' does not parse: " + e.getMessage(), e);
      }
      long fingerprint = SchemaNormalization.parsingFingerprint64(schema);
      byName.put(entry.getKey(), schema);
      byFingerprint.put(fingerprint, schema);
      namesByFingerprint.put(fingerprint, entry.getKey());
    }
  }

  /**
   * The schema named {@code name}.
   *
   * @throws IllegalArgumentException no such schema; the message lists the known ones
   */
  public Schema get(String name) {
    Schema schema = byName.get(name);
    if (schema == null) {
      throw new IllegalArgumentException(
          "no schema named '" + name + "'; known: " + new TreeSet<>(byName.keySet()));
    }
    return schema;
  }

  /** The schema with this CRC-64-AVRO fingerprint, or {@code null}. */
  public Schema byFingerprint(long fingerprint) {
    return byFingerprint.get(fingerprint);
  }

  /** Names of every schema. */
  public java.util.Set<String> names() {
    return byName.keySet();
  }

  /** The name of the schema with this fingerprint, or {@code null}. */
  public String nameOf(long fingerprint) {
    return namesByFingerprint.get(fingerprint);
  }
}
