package io.floodgate.spark.kafka;

import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.KafkaConsumer;

/**
 * The Kafka client's own class names in {@code kafka.*} options, as the shaded jar names them.
 *
 * <p>The jar relocates kafka-clients under {@code io.floodgate.shaded} (jvm/pom.xml,
 * maven-shade-plugin), so a user's {@code kafka.sasl.jaas.config = org.apache.kafka.common.security
 * .scram.ScramLoginModule required ...;}, written for Spark's Kafka source, names a class the jar
 * does not hold, and the client fails with "class not found". Where an option's value names a class
 * of kafka-clients ({@code org.apache.kafka.*}), that name gets the jar's prefix:
 *
 * <ul>
 *   <li>{@code sasl.jaas.config}: the login module of each entry (its first word), never an
 *       option's value (a password that looks like a class name stays as written);
 *   <li>the class options of Kafka's consumer and producer configs ({@link #CLASSES}, each a {@code
 *       ConfigDef.Type.CLASS}), {@code config.providers.<name>.class};
 *   <li>the comma-separated lists {@link #CLASS_LISTS}.
 * </ul>
 *
 * <p>Other classes (a user's own login module, {@code com.example.Handler}) are not touched: they
 * come from the user's jars and see the unshaded names. Outside the shaded jar (the unit tests, a
 * build on unrelocated classes) nothing is rewritten: whether the jar is shaded is read at runtime
 * from {@code KafkaConsumer}'s own name.
 */
final class ShadedClassNames {
  /**
   * {@code org.apache.kafka.}, built at runtime: the shade plugin rewrites string constants that
   * name a relocated package, and this one must stay the unshaded name.
   */
  static final String KAFKA = String.join(".", "org", "apache", "kafka") + ".";

  /** The prefix the shaded jar gives Kafka's classes ({@code io.floodgate.shaded.}); "": none. */
  static final String PREFIX = prefixOf(KafkaConsumer.class.getName());

  /** Options whose value is one class name (Kafka's {@code ConfigDef.Type.CLASS} options). */
  static final Set<String> CLASSES =
      Set.of(
          "key.deserializer",
          "value.deserializer",
          "key.serializer",
          "value.serializer",
          "partitioner.class",
          "sasl.client.callback.handler.class",
          "sasl.login.callback.handler.class",
          "sasl.login.class",
          "ssl.engine.factory.class");

  /** Options whose value is a comma-separated list of class names. */
  static final Set<String> CLASS_LISTS =
      Set.of(
          "partition.assignment.strategy",
          "interceptor.classes",
          "metric.reporters",
          "security.providers");

  /** {@code config.providers.<name>.class} (KIP-297's config providers). */
  private static final Pattern CONFIG_PROVIDER =
      Pattern.compile("config\\.providers\\.[^.]+\\.class");

  private ShadedClassNames() {}

  /** The text before {@link #KAFKA} in {@code className} (a Kafka class's runtime name). */
  static String prefixOf(String className) {
    int at = className.indexOf(KAFKA);
    return at > 0 ? className.substring(0, at) : "";
  }

  /** {@link #relocate(Map, String)} with this jar's {@link #PREFIX}. */
  static void relocate(Map<String, String> properties) {
    relocate(properties, PREFIX);
  }

  /**
   * Give the Kafka class names in {@code properties}' class-valued options {@code prefix}.
   *
   * @param properties the Java client's properties, changed in place
   * @param prefix the shaded jar's prefix of Kafka's classes; "": leave them as they are
   */
  static void relocate(Map<String, String> properties, String prefix) {
    if (prefix.isEmpty()) {
      return;
    }
    properties.replaceAll(
        (key, value) -> {
          if (value == null) {
            return null;
          }
          if (key.equals("sasl.jaas.config")) {
            return jaas(value, prefix);
          }
          if (CLASSES.contains(key) || CONFIG_PROVIDER.matcher(key).matches()) {
            return className(value, prefix);
          }
          if (CLASS_LISTS.contains(key)) {
            return classList(value, prefix);
          }
          return value;
        });
  }

  private static String className(String name, String prefix) {
    String trimmed = name.strip();
    return trimmed.startsWith(KAFKA) ? prefix + trimmed : name;
  }

  private static String classList(String names, String prefix) {
    String[] parts = names.split(",", -1);
    for (int i = 0; i < parts.length; i++) {
      parts[i] = className(parts[i], prefix);
    }
    return String.join(",", parts);
  }

  /**
   * A JAAS configuration ({@code <module> <flag> <name>=<value> ...;}, one entry or more) with each
   * entry's module prefixed when it is Kafka's; quoted values (which may hold {@code ;}) are
   * skipped whole.
   */
  static String jaas(String text, String prefix) {
    StringBuilder out = new StringBuilder(text.length() + prefix.length());
    boolean entryStart = true;
    boolean quoted = false;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (quoted) {
        if (c == '\\' && i + 1 < text.length()) {
          out.append(c).append(text.charAt(++i));
          continue;
        }
        quoted = c != '"';
      } else if (entryStart && !Character.isWhitespace(c)) {
        entryStart = false;
        if (text.startsWith(KAFKA, i)) {
          out.append(prefix);
        }
        quoted = c == '"';
      } else if (c == '"') {
        quoted = true;
      } else if (c == ';') {
        entryStart = true;
      }
      out.append(c);
    }
    return out.toString();
  }
}
