package io.floodgate.spark.serde;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A Schema Registry in the test's JVM (com.sun.net.httpserver) with Confluent's answers to {@code
 * GET /schemas/ids/{id}} and {@code GET /subjects/{subject}/versions/{version}}: the schema as JSON
 * text, or 404 with error code 40403 / 40401. It records every request and can be told to answer
 * the next requests with a status of the test's choice, or to ask for a credential.
 */
final class FakeSchemaRegistry implements AutoCloseable {
  private final HttpServer server;
  private final Map<Long, String> schemas = new ConcurrentHashMap<>();
  private final Map<String, String> versions = new ConcurrentHashMap<>();
  private final Map<Long, String> references = new ConcurrentHashMap<>();
  private final Deque<Integer> failures = new ArrayDeque<>();

  /** Path and query of every request, in order. */
  final List<String> requests = new CopyOnWriteArrayList<>();

  /** {@code Authorization} header of every request ({@code ""} when none). */
  final List<String> authorizations = new CopyOnWriteArrayList<>();

  private volatile String requiredAuthorization;

  FakeSchemaRegistry() throws IOException {
    server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext("/", this::answer);
    server.start();
  }

  /** The base URL, e.g. {@code http://127.0.0.1:40123}. */
  String url() {
    return "http://127.0.0.1:" + server.getAddress().getPort();
  }

  void register(long id, String schemaJson) {
    schemas.put(id, schemaJson);
  }

  /**
   * Register {@code id} with a reference to {@code subject} version 1, which holds {@code ref}
   * ({@code null}: the registry has no such subject).
   */
  void registerWithReference(long id, String schemaJson, String name, String subject, String ref) {
    schemas.put(id, schemaJson);
    if (ref != null) {
      versions.put(subject + "/1", ref);
    }
    references.put(
        id, "[{\"name\":\"" + name + "\",\"subject\":\"" + subject + "\",\"version\":1}]");
  }

  /** Answer the next requests with these statuses, one each, then normally again. */
  synchronized void failNext(int... statuses) {
    for (int status : statuses) {
      failures.add(status);
    }
  }

  /** Answer 401 unless a request carries this {@code Authorization} header. */
  void requireAuthorization(String header) {
    requiredAuthorization = header;
  }

  private synchronized Integer nextFailure() {
    return failures.poll();
  }

  private void answer(HttpExchange exchange) throws IOException {
    String path = exchange.getRequestURI().getPath();
    String query = exchange.getRequestURI().getRawQuery();
    String raw = exchange.getRequestURI().getRawPath();
    requests.add(query == null ? raw : raw + "?" + query);
    String auth = exchange.getRequestHeaders().getFirst("Authorization");
    authorizations.add(auth == null ? "" : auth);
    Integer failure = nextFailure();
    if (failure != null) {
      send(exchange, failure, "{\"error_code\":" + failure + "00,\"message\":\"failing\"}");
      return;
    }
    if (requiredAuthorization != null && !requiredAuthorization.equals(auth)) {
      send(exchange, 401, "{\"error_code\":401,\"message\":\"Unauthorized\"}");
      return;
    }
    if (path.startsWith("/schemas/ids/")) {
      long id = Long.parseLong(path.substring("/schemas/ids/".length()));
      String schema = schemas.get(id);
      if (schema == null) {
        send(exchange, 404, "{\"error_code\":40403,\"message\":\"Schema " + id + " not found\"}");
        return;
      }
      String refs = references.get(id);
      send(exchange, 200, answerOf(schema, refs));
      return;
    }
    if (path.startsWith("/subjects/")) {
      String[] parts = path.substring("/subjects/".length()).split("/versions/");
      String schema = versions.get(parts[0] + "/" + parts[1]);
      if (schema == null) {
        send(exchange, 404, "{\"error_code\":40401,\"message\":\"Subject not found\"}");
        return;
      }
      send(exchange, 200, answerOf(schema, null));
      return;
    }
    send(exchange, 404, "<html>no such page</html>");
  }

  private static String answerOf(String schema, String refs) {
    String quoted = "\"" + schema.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    return "{\"schema\":" + quoted + (refs == null ? "" : ",\"references\":" + refs) + "}";
  }

  private static void send(HttpExchange exchange, int status, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().add("Content-Type", "application/vnd.schemaregistry.v1+json");
    exchange.sendResponseHeaders(status, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  @Override
  public void close() {
    server.stop(0);
  }
}
