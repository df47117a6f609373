package io.floodgate.spark.swept;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * The swept-BLOB golden files of tests/golden/blobs/ (made by tests/golden/make_blobs.py), which
 * the Python reader's test reads too: a catalog made from catalog.sql, the records of
 * expected.json.
 */
final class Golden {
  /** tests/golden/blobs/ of the repository (Maven runs the tests in jvm/). */
  static final Path DIR = Paths.get("..", "tests", "golden", "blobs").toAbsolutePath().normalize();

  private static final ObjectMapper JSON = new ObjectMapper();

  private Golden() {}

  static JsonNode json(String name) throws IOException {
    return JSON.readTree(Files.readString(DIR.resolve(name), StandardCharsets.UTF_8));
  }

  /**
   * A SQLite catalog from catalog.sql in {@code folder} whose BLOB directory is {@code blobDir}.
   */
  static String catalog(Path folder, Path blobDir) throws IOException, SQLException {
    return catalog(folder, blobDir.toString());
  }

  /**
   * A SQLite catalog from catalog.sql in {@code folder} whose BLOB directory is {@code blobDir}, a
   * local path or an object URL ({@code s3://bucket/prefix}): its rows name {@code
   * <blobDir>/<file>}.
   */
  static String catalog(Path folder, String blobDir) throws IOException, SQLException {
    Path database = folder.resolve("catalog.db");
    String sql = Files.readString(DIR.resolve("catalog.sql")).replace("@BLOB_DIR@", blobDir);
    try (Connection conn =
            new org.sqlite.JDBC().connect("jdbc:sqlite:" + database, new Properties());
        Statement st = conn.createStatement()) {
      conn.setAutoCommit(false);
      for (String statement : sql.split(";\n")) {
        String trimmed = statement.strip();
        if (!trimmed.isEmpty()
            && !trimmed.equals("BEGIN TRANSACTION")
            && !trimmed.equals("COMMIT")) {
          st.execute(trimmed);
        }
      }
      conn.commit();
    }
    return "sqlite:///" + database;
  }

  /** expected.json's records with offsets in {@code [start, end)}, as compact JSON text. */
  static List<String> expected(long start, long end) throws IOException {
    List<String> out = new ArrayList<>();
    for (JsonNode record : json("expected.json").get("records")) {
      long offset = record.get("offset").asLong();
      if (offset >= start && offset < end) {
        out.add(record.toString());
      }
    }
    return out;
  }

  /**
   * A record as expected.json writes one (confluent-kafka's timestamp kind, hex bytes), as compact
   * JSON text (Jackson's nodes of one number differ by width: text compares what was written).
   */
  static String asGolden(ConsumerRecord<byte[], byte[]> record) {
    var node = JSON.createObjectNode();
    node.put("offset", record.offset());
    node.put("timestamp_type", record.timestampType().id + 1);
    node.put("timestamp", record.timestamp());
    node.put("key", hex(record.key()));
    node.put("value", hex(record.value()));
    var headers = node.putArray("headers");
    for (Header header : record.headers()) {
      headers.addArray().add(header.key()).add(hex(header.value()));
    }
    return node.toString();
  }

  private static String hex(byte[] data) {
    return data == null ? null : HexFormat.of().formatHex(data);
  }
}
