package io.floodgate.spark.swept;

import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;

/**
 * A sweep catalog's SQLAlchemy URL (the {@code sweepCatalog} option, the query group's {@code
 * sweep_catalog_url}) as a JDBC URL and connection properties.
 *
 * <ul>
 *   <li>{@code sqlite:///relative/path}, {@code sqlite:////absolute/path}: SQLAlchemy's rule, the
 *       path is what follows the third slash (a relative one is taken from the JVM's working
 *       directory, as the sweeper's Python process takes it from its own). Query parameters are
 *       ignored; an in-memory database ({@code sqlite://}, {@code :memory:}) is refused: no
 *       sweeper's BLOBs are there.
 *   <li>{@code postgresql[+driver]://user:password@host:port/database?params}: user and password
 *       (percent-decoded) become properties; libpq's {@code connect_timeout} and {@code
 *       application_name} become the JDBC driver's {@code connectTimeout} and {@code
 *       ApplicationName}, other parameters ({@code sslmode}, {@code sslrootcert}, ...) pass as they
 *       are. No host: {@code localhost} (the JDBC driver has no Unix sockets).
 * </ul>
 *
 * @param dialect {@code sqlite} or {@code postgresql}
 * @param jdbcUrl the JDBC URL, without the password
 * @param properties connection properties (user, password, driver settings)
 */
public record CatalogUrl(String dialect, String jdbcUrl, Properties properties) {

  private static final Map<String, String> LIBPQ_TO_JDBC =
      Map.of("connect_timeout", "connectTimeout", "application_name", "ApplicationName");

  /**
   * Parses a SQLAlchemy URL.
   *
   * @throws IllegalArgumentException another database, an in-memory SQLite one, or a malformed URL;
   *     the message names the URL without its password
   */
  public static CatalogUrl parse(String url) {
    int colon = url.indexOf("://");
    if (colon < 0) {
      throw refused(url, "it is not a SQLAlchemy URL (dialect://...)");
    }
    String scheme = url.substring(0, colon);
    String dialect = scheme.contains("+") ? scheme.substring(0, scheme.indexOf('+')) : scheme;
    String rest = url.substring(colon + 3);
    switch (dialect) {
      case "sqlite":
        return sqlite(url, rest);
      case "postgresql":
        return postgresql(url, rest);
      default:
        throw refused(url, "only sqlite:// and postgresql:// sweep catalogs are read");
    }
  }

  private static CatalogUrl sqlite(String url, String rest) {
    int query = rest.indexOf('?');
    String path = query < 0 ? rest : rest.substring(0, query);
    if (!path.startsWith("/") || path.length() == 1 || path.equals("/:memory:")) {
      throw refused(url, "an in-memory SQLite database holds no sweeper's BLOBs");
    }
    return new CatalogUrl("sqlite", "jdbc:sqlite:" + path.substring(1), new Properties());
  }

  private static CatalogUrl postgresql(String url, String rest) {
    Properties props = new Properties();
    String query = null;
    int q = rest.indexOf('?');
    if (q >= 0) {
      query = rest.substring(q + 1);
      rest = rest.substring(0, q);
    }
    int at = rest.lastIndexOf('@');
    if (at >= 0) {
      String credentials = rest.substring(0, at);
      rest = rest.substring(at + 1);
      int sep = credentials.indexOf(':');
      String user = sep < 0 ? credentials : credentials.substring(0, sep);
      if (!user.isEmpty()) {
        props.setProperty("user", decode(user));
      }
      if (sep >= 0) {
        props.setProperty("password", decode(credentials.substring(sep + 1)));
      }
    }
    int slash = rest.indexOf('/');
    String hostPort = slash < 0 ? rest : rest.substring(0, slash);
    String database = slash < 0 ? "" : decode(rest.substring(slash + 1));
    if (hostPort.isEmpty()) {
      hostPort = "localhost";
    }
    if (query != null) {
      for (String pair : query.split("&")) {
        if (pair.isEmpty()) {
          continue;
        }
        int eq = pair.indexOf('=');
        String key = decode(eq < 0 ? pair : pair.substring(0, eq));
        String value = eq < 0 ? "" : decode(pair.substring(eq + 1));
        props.setProperty(LIBPQ_TO_JDBC.getOrDefault(key, key), value);
      }
    }
    return new CatalogUrl("postgresql", "jdbc:postgresql://" + hostPort + "/" + database, props);
  }

  private static String decode(String text) {
    return URLDecoder.decode(text.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  private static IllegalArgumentException refused(String url, String why) {
    return new IllegalArgumentException(
        "sweepCatalog " + withoutPassword(url) + " cannot be read: " + why);
  }

  /** {@code url} with its password, if any, as {@code ***} (for messages and logs). */
  public static String withoutPassword(String url) {
    return url.replaceFirst("(://[^/@:]*:)[^/@]*@", "$1***@");
  }
}
