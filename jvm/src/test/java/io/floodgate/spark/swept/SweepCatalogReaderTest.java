package io.floodgate.spark.swept;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The catalog read over JDBC: URLs, chains with gaps, catalogs made before checksums. */
class SweepCatalogReaderTest {
  @TempDir Path tmp;

  @Test
  void sqlAlchemyUrlsBecomeJdbcUrls() {
    assertEquals("jdbc:sqlite:/abs/c.db", CatalogUrl.parse("sqlite:////abs/c.db").jdbcUrl());
    assertEquals("jdbc:sqlite:rel/c.db", CatalogUrl.parse("sqlite:///rel/c.db").jdbcUrl());
    assertEquals(
        "jdbc:sqlite:/abs/c.db", CatalogUrl.parse("sqlite:////abs/c.db?timeout=5").jdbcUrl());
    CatalogUrl pg =
        CatalogUrl.parse(
            "postgresql+psycopg://fg%40user:p%3Aw%2Fd@db.example:5433/sweeps?sslmode=require"
                + "&connect_timeout=7");
    assertEquals("postgresql", pg.dialect());
    assertEquals("jdbc:postgresql://db.example:5433/sweeps", pg.jdbcUrl());
    assertEquals("fg@user", pg.properties().getProperty("user"));
    assertEquals("p:w/d", pg.properties().getProperty("password"));
    assertEquals("require", pg.properties().getProperty("sslmode"));
    assertEquals("7", pg.properties().getProperty("connectTimeout"));
    assertEquals(
        "jdbc:postgresql://localhost/sweeps", CatalogUrl.parse("postgresql:///sweeps").jdbcUrl());
    assertEquals(
        "jdbc:postgresql://[::1]:5432/s",
        CatalogUrl.parse("postgresql://u@[::1]:5432/s").jdbcUrl());
    for (String refused : List.of("sqlite://", "sqlite:///:memory:", "mysql://h/db", "c.db")) {
      assertThrows(IllegalArgumentException.class, () -> CatalogUrl.parse(refused), refused);
    }
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class, () -> CatalogUrl.parse("mysql://u:secret@h/db"));
    assertFalse(e.getMessage().contains("secret"), e.getMessage());
  }

  @Test
  void aMissingSqliteFileIsAnErrorAndIsNotCreated() {
    Path missing = tmp.resolve("none.db");
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> new SweepCatalogReader("sqlite:///" + missing).covering("t", 0, 0, 10));
    assertTrue(e.getMessage().contains("none.db"), e.getMessage());
    assertFalse(Files.exists(missing));
  }

  @Test
  void aGapInTheChainHandsOverToTheBroker() throws Exception {
    Path dir = Files.createDirectory(tmp.resolve("blobs"));
    BlobRow a = TestBlobs.write(dir, "a.avro", 100, 110, new long[] {100, 105, 109});
    BlobRow b = TestBlobs.write(dir, "b.avro", 120, 130, new long[] {120});
    String url = catalog(dir, a, b);
    SweptRanges ranges = new SweptRanges(new SweepCatalogReader(url));
    SweptRecords records = ranges.read(TestBlobs.TOPIC, TestBlobs.PARTITION, 101, 200, 150);
    List<Long> offsets = new ArrayList<>();
    records.forEachRemaining(r -> offsets.add(r.offset()));
    assertEquals(List.of(105L, 109L), offsets);
    assertEquals(110, records.brokerFrom());
    // From the gap on: in no BLOB.
    DataLossException e =
        assertThrows(
            DataLossException.class,
            () -> ranges.read(TestBlobs.TOPIC, TestBlobs.PARTITION, 110, 200, 150));
    assertEquals(110, e.start());
    assertEquals(200, e.end());
  }

  @Test
  void aCatalogMadeBeforeChecksumsReadsUnsealedRows() throws Exception {
    Path dir = Files.createDirectory(tmp.resolve("blobs"));
    BlobRow a = TestBlobs.write(dir, "a.avro", 100, 110, new long[] {100, 101});
    Path database = tmp.resolve("old.db");
    try (Connection conn =
            new org.sqlite.JDBC().connect("jdbc:sqlite:" + database, new Properties());
        Statement st = conn.createStatement()) {
      // floodgate_blobs as first released: no seal columns, no floodgate_blob_store.
      st.execute(
          "CREATE TABLE floodgate_blobs (id INTEGER NOT NULL, topic VARCHAR NOT NULL, partition"
              + " INTEGER NOT NULL, start_offset BIGINT NOT NULL, end_offset BIGINT NOT NULL, path"
              + " VARCHAR NOT NULL, bytes BIGINT NOT NULL, tuples BIGINT NOT NULL, created FLOAT"
              + " NOT NULL, PRIMARY KEY (id))");
      st.execute(
          "INSERT INTO floodgate_blobs VALUES (1, 'flights', 2, 100, 110, '"
              + a.path()
              + "', "
              + a.bytes()
              + ", 2, 0.0)");
    }
    List<BlobRow> rows =
        new SweepCatalogReader("sqlite:///" + database).covering("flights", 2, 0, 1000);
    assertEquals(1, rows.size());
    assertNull(rows.get(0).sha256());
    assertNull(rows.get(0).blobDir());
    List<Long> offsets = new ArrayList<>();
    new RegisteredBlob(rows.get(0)).forEachRemaining(b -> b.forEach(r -> offsets.add(r.offset())));
    assertEquals(List.of(100L, 101L), offsets);
  }

  /** A catalog from the golden catalog.sql's tables holding {@code rows}, BLOB directory dir. */
  private String catalog(Path dir, BlobRow... rows) throws Exception {
    Path folder = Files.createDirectory(tmp.resolve("catalog"));
    String url = Golden.catalog(folder, dir);
    String database = url.substring("sqlite:///".length());
    try (Connection conn =
            new org.sqlite.JDBC().connect("jdbc:sqlite:" + database, new Properties());
        Statement st = conn.createStatement()) {
      st.execute("DELETE FROM floodgate_blobs");
      long id = 1;
      for (BlobRow r : rows) {
        st.execute(
            String.format(
                "INSERT INTO floodgate_blobs VALUES (%d, '%s', %d, %d, %d, '%s', %d, %d, 0.0, '%s',"
                    + " %d, %d)",
                id++,
                r.topic(),
                r.partition(),
                r.startOffset(),
                r.endOffset(),
                r.path(),
                r.bytes(),
                r.tuples(),
                r.sha256(),
                r.firstOffset(),
                r.lastOffset()));
      }
    }
    return url;
  }
}
