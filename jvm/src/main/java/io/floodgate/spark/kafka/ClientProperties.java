package io.floodgate.spark.kafka;

import io.floodgate.spark.options.OptionText;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;

/**
 * {@code kafka.*} options as the Java client's properties.
 *
 * <p>Spark's users write the Java client's names; a query group passing its {@code [kafka] client}
 * settings, which Floodgate's Python clients share, writes librdkafka's (CONFIGURATION.md of
 * librdkafka). Most names mean the same in both and pass through; those that differ are translated:
 *
 * <ul>
 *   <li>{@code sasl.mechanisms} is {@code sasl.mechanism}; {@code fetch.wait.max.ms} is {@code
 *       fetch.max.wait.ms}; a Java name given too wins.
 *   <li>{@code sasl.username} and {@code sasl.password} (mechanism {@code PLAIN}, the default, or
 *       {@code SCRAM-SHA-256}/{@code -512}) become {@code sasl.jaas.config} with Kafka's {@code
 *       PlainLoginModule} or {@code ScramLoginModule}, unless {@code sasl.jaas.config} is given;
 *       for another mechanism they are dropped, as librdkafka ignores them.
 *   <li>{@code ssl.ca.location}: a PEM file is a PEM truststore ({@code ssl.truststore.type=PEM},
 *       {@code ssl.truststore.location}); a directory's PEM files are its certificates ({@code
 *       ssl.truststore.certificates}); {@code probe} is the JVM's default trust. {@code ssl.ca.pem}
 *       is {@code ssl.truststore.certificates}.
 *   <li>{@code ssl.certificate.location} with {@code ssl.key.location} (or {@code
 *       ssl.certificate.pem} with {@code ssl.key.pem}) are a PEM keystore ({@code
 *       ssl.keystore.type=PEM}, {@code ssl.keystore.certificate.chain}, {@code ssl.keystore.key}:
 *       the files are read where the client is made, as librdkafka reads them); {@code
 *       ssl.key.password} has the same name in both.
 *   <li>{@code ssl.keystore.location} (a PKCS#12 file in librdkafka) sets {@code
 *       ssl.keystore.type=PKCS12} unless a type is given.
 *   <li>{@code ssl.endpoint.identification.algorithm=none} is the Java client's empty value.
 *   <li>librdkafka-only tuning ({@code queued.min.messages}, {@code statistics.interval.ms}, ...)
 *       is dropped; the Java client would only warn that it does not know it.
 * </ul>
 *
 * <p>Then, in the shaded jar, the Kafka class names of options naming classes (a JAAS login module,
 * callback handlers, assignors, ...) get the jar's relocated package ({@link ShadedClassNames}).
 */
public final class ClientProperties {
  /** librdkafka tuning with no Java counterpart: dropped. */
  private static final Set<String> LIBRDKAFKA_ONLY =
      Set.of(
          "fetch.queue.backoff.ms",
          "queued.min.messages",
          "queued.max.messages.kbytes",
          "enable.auto.offset.store",
          "enable.partition.eof",
          "socket.keepalive.enable",
          "statistics.interval.ms",
          "topic.metadata.refresh.interval.ms",
          "api.version.request",
          "broker.version.fallback",
          "log.connection.close",
          "log_level",
          "debug");

  /** librdkafka names whose Java property has another name. */
  private static final Map<String, String> RENAMED =
      Map.of("sasl.mechanisms", "sasl.mechanism", "fetch.wait.max.ms", "fetch.max.wait.ms");

  /** librdkafka properties translated below, never passed as they are. */
  private static final Set<String> FOLDED =
      Set.of(
          "sasl.username",
          "sasl.password",
          "ssl.ca.location",
          "ssl.ca.pem",
          "ssl.certificate.location",
          "ssl.key.location",
          "ssl.certificate.pem",
          "ssl.key.pem");

  /** Prefixes of properties every client (consumer and producer) takes: security, client id. */
  private static final Set<String> SHARED_PREFIXES =
      Set.of("security.", "sasl.", "ssl.", "client.", "bootstrap.", "connections.", "metadata.");

  private ClientProperties() {}

  /**
   * The Java client's properties of {@code client} (names as the user wrote them, lower case).
   *
   * @param client {@code kafka.*} options without the prefix
   * @return the properties to give the Java client, in the order given
   * @throws IllegalArgumentException a certificate without its key (or a key without its
   *     certificate), or a certificate, key or CA file that cannot be read (naming the property and
   *     the path)
   */
  public static Map<String, String> forJava(Map<String, String> client) {
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : client.entrySet()) {
      String key = e.getKey();
      String value = e.getValue();
      if (LIBRDKAFKA_ONLY.contains(key) || FOLDED.contains(key)) {
        continue;
      }
      if (RENAMED.containsKey(key)) {
        if (!client.containsKey(RENAMED.get(key))) {
          out.put(RENAMED.get(key), value);
        }
      } else if (key.equals("ssl.endpoint.identification.algorithm")
          && value.equalsIgnoreCase("none")) {
        out.put(key, "");
      } else {
        out.put(key, value);
      }
    }
    if (client.containsKey("ssl.keystore.location")) {
      out.putIfAbsent("ssl.keystore.type", "PKCS12");
    }
    jaas(client, out);
    truststore(client, out);
    keystore(client, out);
    ShadedClassNames.relocate(out);
    return out;
  }

  private static void jaas(Map<String, String> client, Map<String, String> out) {
    String user = client.get("sasl.username");
    if (user == null || out.containsKey("sasl.jaas.config")) {
      return;
    }
    String mechanism =
        out.getOrDefault("sasl.mechanism", "PLAIN").toUpperCase(java.util.Locale.ROOT);
    String module;
    if (mechanism.equals("PLAIN")) {
      module = "org.apache.kafka.common.security.plain.PlainLoginModule";
    } else if (mechanism.startsWith("SCRAM-")) {
      module = "org.apache.kafka.common.security.scram.ScramLoginModule";
    } else {
      return; // librdkafka uses sasl.username and sasl.password for PLAIN and SCRAM only
    }
    out.put(
        "sasl.jaas.config",
        module
            + " required username=\""
            + escape(user)
            + "\" password=\""
            + escape(client.getOrDefault("sasl.password", ""))
            + "\";");
  }

  private static void truststore(Map<String, String> client, Map<String, String> out) {
    if (out.containsKey("ssl.truststore.location")
        || out.containsKey("ssl.truststore.certificates")) {
      return; // the Java client's own names win
    }
    String pem = client.get("ssl.ca.pem");
    String ca = client.get("ssl.ca.location");
    if (pem != null) {
      out.put("ssl.truststore.type", "PEM");
      out.put("ssl.truststore.certificates", pem);
    } else if (ca != null && !ca.equals("probe")) {
      Path path = Path.of(ca);
      out.put("ssl.truststore.type", "PEM");
      if (Files.isDirectory(path)) {
        out.put("ssl.truststore.certificates", directoryPem("ssl.ca.location", path));
      } else {
        out.put("ssl.truststore.location", ca);
      }
    }
  }

  private static void keystore(Map<String, String> client, Map<String, String> out) {
    String certificate = client.get("ssl.certificate.pem");
    String key = client.get("ssl.key.pem");
    String certificatePath = client.get("ssl.certificate.location");
    String keyPath = client.get("ssl.key.location");
    if (certificate == null && certificatePath != null) {
      certificate = read("ssl.certificate.location", Path.of(certificatePath));
    }
    if (key == null && keyPath != null) {
      key = read("ssl.key.location", Path.of(keyPath));
    }
    if (certificate == null && key == null) {
      return;
    }
    if (certificate == null || key == null) {
      throw OptionText.refuse(
          "options 'kafka.ssl.certificate.location' (or .pem) and 'kafka.ssl.key.location' (or"
              + " .pem) go together: a client certificate and its private key");
    }
    if (out.containsKey("ssl.keystore.location")) {
      return; // the Java client's own keystore wins
    }
    out.put("ssl.keystore.type", "PEM");
    out.put("ssl.keystore.certificate.chain", certificate);
    out.put("ssl.keystore.key", key);
  }

  private static String read(String property, Path path) {
    try {
      return Files.readString(path, StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw OptionText.refuse(
          "option 'kafka." + property + "' = " + OptionText.repr(path.toString()) + ": " + e);
    }
  }

  /** The PEM files of a CA directory (as OpenSSL's CApath), concatenated in name order. */
  private static String directoryPem(String property, Path directory) {
    List<Path> files = new ArrayList<>();
    try (Stream<Path> listed = Files.list(directory)) {
      listed.filter(Files::isRegularFile).sorted().forEach(files::add);
    } catch (IOException e) {
      throw OptionText.refuse(
          "option 'kafka." + property + "' = " + OptionText.repr(directory.toString()) + ": " + e);
    }
    StringBuilder pem = new StringBuilder();
    for (Path file : files) {
      String text = read(property, file);
      if (text.contains("-----BEGIN CERTIFICATE-----")) {
        pem.append(text.strip()).append('\n');
      }
    }
    return pem.toString();
  }

  /** Whether a client of another kind (the dead letters' producer) takes {@code key} too. */
  public static boolean isShared(String key) {
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
