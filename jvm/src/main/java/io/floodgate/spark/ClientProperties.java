package io.floodgate.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * {@code kafka.*} options as the Java client's properties. Users write Spark's dialect (the Java
 * client's names); the Python source's users may have written librdkafka's, and the query group
 * passes its {@code [kafka.client]} settings in librdkafka's: the names that differ are translated,
 * librdkafka-only tuning is dropped.
 */
final class ClientProperties {
  /** librdkafka tuning with no Java counterpart: dropped. */
  private static final Set<String> LIBRDKAFKA_ONLY =
      Set.of(
          "fetch.wait.max.ms",
          "fetch.queue.backoff.ms",
          "queued.min.messages",
          "queued.max.messages.kbytes",
          "enable.auto.offset.store",
          "socket.keepalive.enable",
          "statistics.interval.ms",
          "topic.metadata.refresh.interval.ms",
          "api.version.request",
          "broker.version.fallback",
          "log_level",
          "debug");

  /** Prefixes of properties every client (consumer and producer) takes: security, client id. */
  private static final Set<String> SHARED_PREFIXES =
      Set.of("security.", "sasl.", "ssl.", "client.", "bootstrap.", "connections.", "metadata.");

  private ClientProperties() {}

  static Map<String, String> forJava(Map<String, String> client) {
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : client.entrySet()) {
      String key = e.getKey();
      if (LIBRDKAFKA_ONLY.contains(key)) {
        continue;
      }
      if (key.equals("sasl.mechanisms")) {
        out.put("sasl.mechanism", e.getValue());
      } else if (key.equals("sasl.username") || key.equals("sasl.password")) {
        continue; // folded into sasl.jaas.config below
      } else {
        out.put(key, e.getValue());
      }
    }
    String user = client.get("sasl.username");
    if (user != null && !out.containsKey("sasl.jaas.config")) {
      String mechanism = out.getOrDefault("sasl.mechanism", "PLAIN");
      String module =
          mechanism.startsWith("SCRAM")
              ? "org.apache.kafka.common.security.scram.ScramLoginModule"
              : "org.apache.kafka.common.security.plain.PlainLoginModule";
      out.put(
          "sasl.jaas.config",
          module
              + " required username=\""
              + escape(user)
              + "\" password=\""
              + escape(client.getOrDefault("sasl.password", ""))
              + "\";");
    }
    String ca = client.get("ssl.ca.location");
    if (ca != null) {
      out.remove("ssl.ca.location");
      out.putIfAbsent("ssl.truststore.type", "PEM");
      out.putIfAbsent("ssl.truststore.location", ca);
    }
    return out;
  }

  static boolean isShared(String key) {
    for (String prefix : SHARED_PREFIXES) {
      if (key.startsWith(prefix)) {
        return true;
      }
    }
    return false;
  }

  private static String escape(String text) {
    return text.replace("\\", "\\\\").replace("\"", "\\\"");
  }
}
