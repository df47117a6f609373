package io.floodgate.spark.serde;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.ProxySelector;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.stream.Stream;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;

/**
 * Writer schemas by id from a Schema Registry with Confluent's REST API (Confluent's own, Karapace,
 * Apicurio Registry's {@code /apis/ccompat/v7}): {@code GET /schemas/ids/{id}?subject=<subject>},
 * the request confluent-kafka's {@code AvroDeserializer} makes, and {@code GET
 * /subjects/{subject}/versions/{version}} for the schemas a schema references (its {@code
 * _resolve_named_schema}).
 *
 * <p>Configured with the keys of confluent-kafka's {@code SchemaRegistryClient} (option {@code
 * schemaRegistry.<key>}, keys lower-cased as Spark gives them):
 *
 * <ul>
 *   <li>{@code url}: required; one or more {@code http(s)://} base URLs, comma-separated, tried in
 *       turn when one does not answer; credentials may be in the URL ({@code
 *       http://user:password@host}).
 *   <li>{@code basic.auth.user.info}: {@code user:password}, HTTP basic authentication (not with
 *       credentials in the URL, as confluent-kafka refuses).
 *   <li>{@code bearer.auth.credentials.source = STATIC_TOKEN} with {@code bearer.auth.token},
 *       {@code bearer.auth.logical.cluster} and optionally {@code bearer.auth.identity.pool.id}.
 *   <li>{@code ssl.ca.location}: a PEM file (or a folder of them) of the CAs the registry's
 *       certificate is checked against; default the JVM's trust store.
 *   <li>{@code proxy}: {@code http://host:port}.
 *   <li>{@code timeout}: seconds one request may take; default {@value #DEFAULT_TIMEOUT_S} (where
 *       confluent-kafka waits for ever, a task would hang).
 *   <li>{@code max.retries} (default 3), {@code retries.wait.ms} (1 000), {@code
 *       retries.max.wait.ms} (20 000): a request that fails on the network or with HTTP 408, 429,
 *       500, 502, 503 or 504 is retried after a random wait of up to {@code min(retries.wait.ms *
 *       2^attempt, retries.max.wait.ms)}, confluent-kafka's full jitter.
 *   <li>{@code cache.capacity}, {@code cache.latest.ttl.sec}: accepted, no effect (schemas by id
 *       never change, and the latest version is never asked).
 * </ul>
 *
 * Refused, naming the key: client certificates ({@code ssl.certificate.location}, {@code
 * ssl.key.location}, {@code ssl.key.password}), other bearer sources (OAuth), and unknown keys.
 *
 * <p>Schemas are cached by id for the life of the JVM ({@link #shared}): a registry never changes
 * the schema of an id. "Not found" is never cached, as confluent-kafka's client does not.
 * Thread-safe.
 */
public final class SchemaRegistryClient {
  /** Seconds a request may take when option {@code timeout} is not given. */
  public static final int DEFAULT_TIMEOUT_S = 30;

  /** HTTP statuses confluent-kafka retries ({@code is_retriable}). */
  static final Set<Integer> RETRIABLE = Set.of(408, 429, 500, 502, 503, 504);

  private static final String ACCEPT =
      "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json,"
          + " application/json";
  private static final Set<String> NO_EFFECT = Set.of("cache.capacity", "cache.latest.ttl.sec");
  private static final Set<String> KNOWN =
      Set.of(
          "url",
          "basic.auth.user.info",
          "bearer.auth.credentials.source",
          "bearer.auth.token",
          "bearer.auth.logical.cluster",
          "bearer.auth.identity.pool.id",
          "ssl.ca.location",
          "proxy",
          "timeout",
          "max.retries",
          "retries.wait.ms",
          "retries.max.wait.ms",
          "cache.capacity",
          "cache.latest.ttl.sec");
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<Map<String, String>, SchemaRegistryClient> SHARED =
      new ConcurrentHashMap<>();

  private final List<String> baseUrls;
  private final String shownUrl;
  private final Map<String, String> headers = new LinkedHashMap<>();
  private final Duration timeout;
  private final int maxRetries;
  private final long retriesWaitMs;
  private final long retriesMaxWaitMs;
  private final HttpClient http;
  private final Map<Long, Schema> byId = new ConcurrentHashMap<>();

  /**
   * The client of this configuration, one per JVM, so the tasks of an executor share its cache.
   *
   * @param conf the {@code schemaRegistry.*} options without the prefix
   * @throws IllegalArgumentException as {@link #SchemaRegistryClient(Map)}
   */
  public static SchemaRegistryClient shared(Map<String, String> conf) {
    Map<String, String> key = new TreeMap<>(conf);
    SchemaRegistryClient client = SHARED.get(key);
    if (client == null) {
      client = SHARED.computeIfAbsent(key, SchemaRegistryClient::new);
    }
    return client;
  }

  /**
   * @param conf the {@code schemaRegistry.*} options without the prefix (keys lower-cased)
   * @throws IllegalArgumentException no {@code url}, a URL that is not {@code http(s)://}, a key
   *     refused or unknown, a value that does not parse; the message names the option
   */
  public SchemaRegistryClient(Map<String, String> conf) {
    Map<String, String> given = new TreeMap<>();
    conf.forEach((k, v) -> given.put(k.toLowerCase(Locale.ROOT), v));
    refuseUnsupported(given);
    String url = given.get("url");
    if (url == null || url.isBlank()) {
      throw refuse(
          "encoding = 'confluent' needs option schemaRegistry.url (the Schema Registry the"
              + " stream's schema ids come from)");
    }
    List<String> bases = new ArrayList<>();
    List<String> shown = new ArrayList<>();
    String userInfo = null;
    for (String part : url.split(",")) {
      String base = part.strip().replaceAll("/+$", "");
      URI uri;
      try {
        uri = new URI(base);
      } catch (URISyntaxException e) {
        throw refuse("schemaRegistry.url: '" + base + "' is not a URL: " + e.getMessage());
      }
      String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(Locale.ROOT);
      if (!(scheme.equals("http") || scheme.equals("https")) || uri.getHost() == null) {
        throw refuse(
            "schemaRegistry.url: '"
                + withoutUserInfo(uri)
                + "'; allowed: http:// or https:// URLs, comma-separated");
      }
      if (uri.getRawUserInfo() != null) {
        userInfo = decodeUserInfo(uri.getRawUserInfo());
      }
      bases.add(withoutUserInfo(uri));
      shown.add(withoutUserInfo(uri));
    }
    baseUrls = List.copyOf(bases);
    shownUrl = String.join(",", shown);
    String basic = given.get("basic.auth.user.info");
    if (basic != null) {
      if (userInfo != null) {
        throw refuse(
            "schemaRegistry.basic.auth.user.info and credentials in schemaRegistry.url say the"
                + " same thing; give one of them");
      }
      if (!basic.contains(":")) {
        throw refuse("schemaRegistry.basic.auth.user.info: allowed: user:password");
      }
      userInfo = basic;
    }
    if (userInfo != null) {
      headers.put(
          "Authorization",
          "Basic " + Base64.getEncoder().encodeToString(userInfo.getBytes(StandardCharsets.UTF_8)));
    }
    bearer(given, userInfo != null);
    timeout = Duration.ofMillis(seconds(given, "timeout", DEFAULT_TIMEOUT_S));
    maxRetries = Math.toIntExact(whole(given, "max.retries", 3));
    retriesWaitMs = whole(given, "retries.wait.ms", 1_000);
    retriesMaxWaitMs = whole(given, "retries.max.wait.ms", 20_000);
    HttpClient.Builder builder =
        HttpClient.newBuilder().connectTimeout(timeout).followRedirects(HttpClient.Redirect.NORMAL);
    if (given.get("ssl.ca.location") != null) {
      builder.sslContext(trusting(Path.of(given.get("ssl.ca.location"))));
    }
    if (given.get("proxy") != null) {
      builder.proxy(proxy(given.get("proxy")));
    }
    http = builder.build();
  }

  /** The registry's URL(s) as configured, without credentials. */
  public String url() {
    return shownUrl;
  }

  /**
   * The writer schema registered under {@code id}, its references parsed with it; cached.
   *
   * @param id the schema id of a tuple's framing
   * @param subject the subject the reader expects it under ({@code <topic>-value}), sent as
   *     confluent-kafka sends it; {@code null}: none
   * @throws SchemaNotFound the registry answered 404 (no schema of that id, or a referenced subject
   *     or version it does not have)
   * @throws SchemaParseException the schema is not an Avro schema ({@code schemaType} other than
   *     AVRO) or does not parse
   * @throws SchemaRegistryException the registry could not be asked
   */
  public Schema schemaById(long id, String subject) throws SchemaNotFound {
    Schema schema = byId.get(id);
    if (schema != null) {
      return schema;
    }
    String query = subject == null ? "" : "?subject=" + encode(subject);
    JsonNode answer = get("/schemas/ids/" + id + query);
    schema = parse(answer, "schema id " + id);
    byId.putIfAbsent(id, schema);
    return schema;
  }

  private Schema parse(JsonNode answer, String what) throws SchemaNotFound {
    String type = answer.path("schemaType").asText("AVRO");
    if (!type.isEmpty() && !type.equals("AVRO")) {
      throw new SchemaParseException(
          what + " of the Schema Registry at " + shownUrl + " is a " + type + " schema, not Avro");
    }
    Schema.Parser parser = new Schema.Parser();
    addReferences(parser, answer.path("references"), new HashSet<>());
    JsonNode text = answer.get("schema");
    if (text == null || !text.isTextual()) {
      throw new SchemaRegistryException(
          shownUrl,
          "the Schema Registry at " + shownUrl + " answered " + what + " without a schema",
          null);
    }
    return parser.parse(text.asText());
  }

  /** Parse every schema {@code references} names (theirs first), each once, into {@code parser}. */
  private void addReferences(Schema.Parser parser, JsonNode references, Set<String> parsed)
      throws SchemaNotFound {
    for (JsonNode reference : references) {
      String subject = reference.path("subject").asText();
      String version = reference.path("version").asText();
      if (!parsed.add(subject + "/" + version)) {
        continue;
      }
      JsonNode answer = get("/subjects/" + encode(subject) + "/versions/" + encode(version));
      addReferences(parser, answer.path("references"), parsed);
      parser.parse(answer.path("schema").asText());
    }
  }

  /**
   * {@code GET path} on each base URL in turn, with the retries; the JSON of a 2xx answer.
   *
   * @throws SchemaNotFound HTTP 404
   * @throws SchemaRegistryException no answer, or one other than 2xx and 404
   */
  JsonNode get(String path) throws SchemaNotFound {
    HttpResponse<byte[]> response = null;
    IOException failure = null;
    for (int u = 0; u < baseUrls.size(); u++) {
      failure = null;
      try {
        response = send(baseUrls.get(u) + path);
      } catch (IOException e) {
        failure = e;
        continue;
      }
      if (!RETRIABLE.contains(response.statusCode())) {
        break;
      }
    }
    if (failure != null) {
      throw new SchemaRegistryException(
          shownUrl,
          "the Schema Registry at "
              + shownUrl
              + " could not be asked (GET "
              + path
              + ", "
              + (maxRetries + 1)
              + " attempts per URL): "
              + failure.getClass().getSimpleName()
              + ": "
              + failure.getMessage(),
          failure);
    }
    int status = response.statusCode();
    JsonNode body = null;
    try {
      body = JSON.readTree(response.body());
    } catch (IOException | RuntimeException e) {
      // not JSON: named below by its status
    }
    if (status == 404) {
      throw new SchemaNotFound(message(body, response));
    }
    if (status < 200 || status > 299 || body == null || !body.isObject()) {
      throw new SchemaRegistryException(
          shownUrl,
          "the Schema Registry at "
              + shownUrl
              + " answered GET "
              + path
              + " with HTTP "
              + status
              + ": "
              + message(body, response),
          null);
    }
    return body;
  }

  /** One URL, with the retries; the last answer (perhaps a retriable status). */
  private HttpResponse<byte[]> send(String url) throws IOException {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(url)).timeout(timeout).header("Accept", ACCEPT).GET();
    headers.forEach(request::header);
    HttpRequest built = request.build();
    for (int attempt = 0; ; attempt++) {
      try {
        HttpResponse<byte[]> response = http.send(built, HttpResponse.BodyHandlers.ofByteArray());
        if (!RETRIABLE.contains(response.statusCode()) || attempt >= maxRetries) {
          return response;
        }
      } catch (IOException e) {
        if (attempt >= maxRetries) {
          throw e;
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new SchemaRegistryException(
            shownUrl, "interrupted while asking the Schema Registry at " + shownUrl, e);
      }
      pause(attempt);
    }
  }

  private void pause(int attempt) {
    double ceiling = Math.min(retriesWaitMs * Math.pow(2, attempt), retriesMaxWaitMs);
    long waitMs = (long) (ThreadLocalRandom.current().nextDouble() * ceiling);
    try {
      Thread.sleep(waitMs);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new SchemaRegistryException(
          shownUrl, "interrupted while asking the Schema Registry at " + shownUrl, e);
    }
  }

  /** The registry's {@code message}, or the start of the body. */
  private static String message(JsonNode body, HttpResponse<byte[]> response) {
    if (body != null && body.hasNonNull("message")) {
      String code = body.hasNonNull("error_code") ? " (error " + body.get("error_code") + ")" : "";
      return body.get("message").asText() + code;
    }
    String text = new String(response.body(), StandardCharsets.UTF_8).strip();
    return text.isEmpty() ? "empty body" : text.substring(0, Math.min(200, text.length()));
  }

  private static void refuseUnsupported(Map<String, String> given) {
    for (String key : List.of("ssl.certificate.location", "ssl.key.location", "ssl.key.password")) {
      if (given.containsKey(key)) {
        throw refuse(
            "option schemaRegistry."
                + key
                + " is not supported by the JVM source: it does not present client certificates"
                + " to the Schema Registry");
      }
    }
    Set<String> unknown = new TreeSet<>(given.keySet());
    unknown.removeAll(KNOWN);
    if (!unknown.isEmpty()) {
      Set<String> allowed = new TreeSet<>(KNOWN);
      allowed.removeAll(NO_EFFECT);
      throw refuse(
          "options "
              + unknown.stream().map(k -> "schemaRegistry." + k).toList()
              + " are unknown; allowed: schemaRegistry. followed by one of "
              + allowed);
    }
  }

  private void bearer(Map<String, String> given, boolean basic) {
    String source = given.get("bearer.auth.credentials.source");
    if (source == null) {
      return;
    }
    if (!source.equals("STATIC_TOKEN")) {
      throw refuse(
          "schemaRegistry.bearer.auth.credentials.source = '"
              + source
              + "'; allowed: STATIC_TOKEN (the JVM source fetches no OAuth tokens)");
    }
    if (basic) {
      throw refuse(
          "schemaRegistry.bearer.auth.credentials.source and basic authentication both say how"
              + " to log in; give one of them");
    }
    for (String key : List.of("bearer.auth.token", "bearer.auth.logical.cluster")) {
      if (given.get(key) == null) {
        throw refuse(
            "schemaRegistry.bearer.auth.credentials.source = 'STATIC_TOKEN' needs option"
                + " schemaRegistry."
                + key);
      }
    }
    headers.put("Authorization", "Bearer " + given.get("bearer.auth.token"));
    headers.put("target-sr-cluster", given.get("bearer.auth.logical.cluster"));
    if (given.get("bearer.auth.identity.pool.id") != null) {
      headers.put("Confluent-Identity-Pool-Id", given.get("bearer.auth.identity.pool.id"));
    }
  }

  private static SSLContext trusting(Path location) {
    try {
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      CertificateFactory factory = CertificateFactory.getInstance("X.509");
      List<Path> files;
      if (Files.isDirectory(location)) {
        try (Stream<Path> listed = Files.list(location)) {
          files = listed.filter(Files::isRegularFile).sorted().toList();
        }
      } else {
        files = List.of(location);
      }
      int n = 0;
      for (Path file : files) {
        try (InputStream in = Files.newInputStream(file)) {
          for (Certificate certificate : factory.generateCertificates(in)) {
            store.setCertificateEntry("ca-" + n++, certificate);
          }
        }
      }
      if (n == 0) {
        throw refuse("schemaRegistry.ssl.ca.location: no certificate in " + location);
      }
      TrustManagerFactory trust =
          TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(store);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, trust.getTrustManagers(), null);
      return context;
    } catch (IOException | GeneralSecurityException e) {
      throw new IllegalArgumentException(
          "floodgate_kafka: schemaRegistry.ssl.ca.location: "
              + location
              + " does not load as PEM certificates: "
              + e.getMessage(),
          e);
    }
  }

  private static ProxySelector proxy(String text) {
    URI uri = URI.create(text.contains("://") ? text : "http://" + text);
    if (uri.getHost() == null || uri.getPort() < 0) {
      throw refuse("schemaRegistry.proxy = '" + text + "'; allowed: http://host:port");
    }
    return ProxySelector.of(new InetSocketAddress(uri.getHost(), uri.getPort()));
  }

  private static long seconds(Map<String, String> given, String key, long fallbackS) {
    String text = given.get(key);
    if (text == null) {
      return fallbackS * 1000;
    }
    try {
      double value = Double.parseDouble(text);
      if (value > 0 && !Double.isInfinite(value)) {
        return Math.max(1, Math.round(value * 1000));
      }
    } catch (NumberFormatException e) {
      // refused below
    }
    throw refuse("schemaRegistry." + key + " = '" + text + "'; allowed: seconds > 0");
  }

  private static long whole(Map<String, String> given, String key, long fallback) {
    String text = given.get(key);
    if (text == null) {
      return fallback;
    }
    try {
      long value = Long.parseLong(text.strip());
      if (value >= 0 && value <= Integer.MAX_VALUE) {
        return value;
      }
    } catch (NumberFormatException e) {
      // refused below
    }
    throw refuse("schemaRegistry." + key + " = '" + text + "'; allowed: a whole number >= 0");
  }

  private static String withoutUserInfo(URI uri) {
    String port = uri.getPort() < 0 ? "" : ":" + uri.getPort();
    String path = uri.getRawPath() == null ? "" : uri.getRawPath();
    return uri.getScheme() + "://" + uri.getHost() + port + path;
  }

  /**
   * {@code user:password} of a URL's raw user info, each percent-decoded as UTF-8, a {@code +} kept
   * (RFC 3986's user info, not a form).
   */
  private static String decodeUserInfo(String raw) {
    int colon = raw.indexOf(':');
    String user = colon < 0 ? raw : raw.substring(0, colon);
    String password = colon < 0 ? "" : raw.substring(colon + 1);
    return unquote(user) + ":" + unquote(password);
  }

  private static String unquote(String text) {
    return URLDecoder.decode(text.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  private static String encode(String text) {
    return URLEncoder.encode(text, StandardCharsets.UTF_8).replace("+", "%20");
  }

  private static IllegalArgumentException refuse(String what) {
    return new IllegalArgumentException("floodgate_kafka: " + what);
  }

  /** The registry answered 404: it has no schema of the id (or a subject a reference names). */
  public static final class SchemaNotFound extends Exception {
    private static final long serialVersionUID = 1L;

    /**
     * @param registryMessage the registry's own words (its {@code message} and {@code error_code})
     */
    public SchemaNotFound(String registryMessage) {
      super(registryMessage, null, false, false);
    }
  }
}
