package io.floodgate.spark.swept;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Driver;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

/**
 * Reads the sweep catalog's BLOB chains over JDBC: the rows of {@code floodgate_blobs} and the BLOB
 * directory of {@code floodgate_blob_store} (the tables {@code pipeline.swept.tables} defines;
 * docs/formats.md, "Swept BLOBs"). Read only: nothing is created, altered or locked, and a SQLite
 * file that does not exist is an error, not a new empty catalog.
 *
 * <p>A connection per call: a task asks the catalog only when a range starts below the broker's log
 * start, once per range. The drivers are instantiated directly rather than through {@code
 * DriverManager}, which does not see drivers of a jar added by {@code spark.jars}.
 */
public final class SweepCatalogReader {
  /** Seconds a read waits for a SQLite writer (the sweeper) to let go. */
  static final int BUSY_TIMEOUT_S = 30;

  private final String url;
  private final CatalogUrl target;

  /**
   * @param url the catalog's SQLAlchemy URL ({@link CatalogUrl})
   * @throws IllegalArgumentException as {@link CatalogUrl#parse}
   */
  public SweepCatalogReader(String url) {
    this.url = url;
    this.target = CatalogUrl.parse(url);
  }

  /**
   * The BLOBs that hold offsets of {@code [start, end)} of a partition, in offset order (as {@code
   * pipeline.swept.catalog.SweepCatalog.covering} finds them).
   *
   * @throws IllegalStateException the catalog cannot be read (the message names its URL, without
   *     password)
   */
  public List<BlobRow> covering(String topic, int partition, long start, long end) {
    try (Connection conn = connect()) {
      String blobDir = blobDir(conn);
      boolean sealed = hasColumn(conn, "floodgate_blobs", "sha256");
      String seal = sealed ? ", sha256, first_offset, last_offset" : "";
      String sql =
          "SELECT id, topic, \"partition\", start_offset, end_offset, path, bytes, tuples"
              + seal
              + " FROM floodgate_blobs WHERE topic = ? AND \"partition\" = ?"
              + " AND end_offset > ? AND start_offset < ? ORDER BY start_offset";
      List<BlobRow> rows = new ArrayList<>();
      try (PreparedStatement st = conn.prepareStatement(sql)) {
        st.setString(1, topic);
        st.setInt(2, partition);
        st.setLong(3, start);
        st.setLong(4, end);
        try (ResultSet rs = st.executeQuery()) {
          while (rs.next()) {
            rows.add(
                new BlobRow(
                    rs.getLong("id"),
                    rs.getString("topic"),
                    rs.getInt("partition"),
                    rs.getLong("start_offset"),
                    rs.getLong("end_offset"),
                    rs.getString("path"),
                    rs.getLong("bytes"),
                    rs.getLong("tuples"),
                    sealed ? rs.getString("sha256") : null,
                    sealed ? nullableLong(rs, "first_offset") : null,
                    sealed ? nullableLong(rs, "last_offset") : null,
                    blobDir));
          }
        }
      }
      return rows;
    } catch (SQLException e) {
      throw new IllegalStateException(
          "the sweep catalog "
              + CatalogUrl.withoutPassword(url)
              + " cannot be read ("
              + e.getMessage()
              + "): swept offsets of "
              + topic
              + "["
              + partition
              + "] ["
              + start
              + ", "
              + end
              + ") are not found",
          e);
    }
  }

  /** {@code floodgate_blob_store.blob_dir}, or {@code null} (no such table or no sweeper yet). */
  private static String blobDir(Connection conn) throws SQLException {
    if (!hasTable(conn, "floodgate_blob_store")) {
      return null;
    }
    try (Statement st = conn.createStatement();
        ResultSet rs = st.executeQuery("SELECT blob_dir FROM floodgate_blob_store WHERE id = 1")) {
      return rs.next() ? rs.getString(1) : null;
    }
  }

  private static boolean hasTable(Connection conn, String table) throws SQLException {
    DatabaseMetaData meta = conn.getMetaData();
    try (ResultSet rs = meta.getTables(null, null, table, new String[] {"TABLE"})) {
      return rs.next();
    }
  }

  /**
   * Catalogs made before checksums have no seal columns ({@code pipeline.swept.tables.add_columns}
   * adds them when it opens one).
   */
  private static boolean hasColumn(Connection conn, String table, String column)
      throws SQLException {
    try (ResultSet rs = conn.getMetaData().getColumns(null, null, table, column)) {
      return rs.next();
    }
  }

  private static Long nullableLong(ResultSet rs, String column) throws SQLException {
    long value = rs.getLong(column);
    return rs.wasNull() ? null : value;
  }

  private Connection connect() throws SQLException {
    Properties props = new Properties();
    props.putAll(target.properties());
    Driver driver;
    if (target.dialect().equals("sqlite")) {
      // Read only, never created: a missing file is an error, not a new empty catalog.
      props.setProperty("open_mode", Integer.toString(0x00000001)); // SQLITE_OPEN_READONLY
      props.setProperty("busy_timeout", Integer.toString(BUSY_TIMEOUT_S * 1000));
      driver = new org.sqlite.JDBC();
    } else {
      props.putIfAbsent("readOnly", "true");
      driver = new org.postgresql.Driver();
    }
    Connection conn = driver.connect(target.jdbcUrl(), props);
    if (conn == null) {
      throw new SQLException("no driver takes " + target.jdbcUrl());
    }
    return conn;
  }
}
