package io.floodgate.spark.read;

import java.util.Locale;
import java.util.Map;
import java.util.function.UnaryOperator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkEnv;

/**
 * The settings of an executor's {@link ConsumerPool}: Spark's own consumer cache settings ({@code
 * spark.kafka.consumer.cache.*}, the {@code package.scala} of Spark's Kafka connector), with
 * Spark's names, defaults and meaning, read from the Spark conf of the executor as Spark's {@code
 * InternalKafkaConsumerPool.PoolConfig} reads them. A user tuning Spark's Kafka source tunes this
 * one with the same keys.
 *
 * @param capacity {@code spark.kafka.consumer.cache.capacity}: consumers kept at most, borrowed and
 *     idle together (default 64). A soft limit, as Spark's: a task that needs a consumer when the
 *     pool is full closes idle ones, oldest first, and gets a new one even if none was idle.
 * @param timeoutMs {@code spark.kafka.consumer.cache.timeout}: ms a consumer may sit idle before
 *     the evictor closes it (default 5 min); {@code <= 0}: never for idleness alone
 * @param evictorIntervalMs {@code spark.kafka.consumer.cache.evictorThreadRunInterval}: ms between
 *     runs of the evictor thread (default 1 min); {@code <= 0}: no evictor thread
 * @param jmx {@code spark.kafka.consumer.cache.jmx.enable}: the pool's counts as a JMX MBean
 *     (default false)
 */
public record ConsumerCacheSettings(
    int capacity, long timeoutMs, long evictorIntervalMs, boolean jmx) {
  public static final String CAPACITY = "spark.kafka.consumer.cache.capacity";
  public static final String TIMEOUT = "spark.kafka.consumer.cache.timeout";
  public static final String EVICTOR_INTERVAL =
      "spark.kafka.consumer.cache.evictorThreadRunInterval";
  public static final String JMX = "spark.kafka.consumer.cache.jmx.enable";

  /** Spark's defaults: 64 consumers, 5 min idle, an evictor run each minute, no JMX. */
  public static final ConsumerCacheSettings DEFAULTS =
      new ConsumerCacheSettings(64, 5 * 60_000L, 60_000L, false);

  /** Spark's time strings: {@code JavaUtils.timeStringAs}, a signed count and a unit. */
  private static final Pattern TIME = Pattern.compile("(-?[0-9]+)([a-z]+)?");

  private static final Map<String, Long> UNIT_US =
      Map.of(
          "us", 1L,
          "ms", 1_000L,
          "s", 1_000_000L,
          "m", 60_000_000L,
          "min", 60_000_000L,
          "h", 3_600_000_000L,
          "d", 86_400_000_000L);

  /**
   * The settings of this executor's Spark conf ({@code SparkEnv.get().conf()}); outside Spark (no
   * {@code SparkEnv}, as in unit tests) Spark's defaults.
   *
   * @throws IllegalArgumentException a value Spark would refuse too (see {@link #from})
   */
  public static ConsumerCacheSettings ofExecutor() {
    SparkEnv env = SparkEnv.get();
    if (env == null) {
      return DEFAULTS;
    }
    return from(key -> env.conf().get(key, null));
  }

  /**
   * The settings in {@code conf} (a key's value, or {@code null} when unset: Spark's default).
   *
   * @throws IllegalArgumentException naming the key, the value and what is allowed: a capacity that
   *     is not a whole number {@code >= 0}; a timeout or interval that is not a Spark time string
   *     (a signed whole number with an optional unit {@code us, ms, s, m, min, h, d}; none is ms);
   *     a JMX switch that is not {@code true} or {@code false}
   */
  public static ConsumerCacheSettings from(UnaryOperator<String> conf) {
    return new ConsumerCacheSettings(
        capacity(conf.apply(CAPACITY)),
        millis(TIMEOUT, conf.apply(TIMEOUT), DEFAULTS.timeoutMs),
        millis(EVICTOR_INTERVAL, conf.apply(EVICTOR_INTERVAL), DEFAULTS.evictorIntervalMs),
        bool(JMX, conf.apply(JMX), DEFAULTS.jmx));
  }

  /** Whether the pool runs an evictor thread: both an interval and an idle timeout are set. */
  public boolean evicts() {
    return evictorIntervalMs > 0 && timeoutMs > 0;
  }

  private static int capacity(String text) {
    if (text == null) {
      return DEFAULTS.capacity;
    }
    try {
      int value = Integer.parseInt(text.trim());
      if (value >= 0) {
        return value;
      }
    } catch (NumberFormatException e) {
      // refused below
    }
    throw refuse(CAPACITY, text, "a whole number >= 0 (Spark's default 64)");
  }

  /** Spark's {@code JavaUtils.timeStringAsMs}: trimmed, lower-cased, {@code us} rounded down. */
  private static long millis(String key, String text, long fallback) {
    if (text == null) {
      return fallback;
    }
    Matcher match = TIME.matcher(text.trim().toLowerCase(Locale.ROOT));
    if (match.matches()) {
      String unit = match.group(2) == null ? "ms" : match.group(2);
      if (UNIT_US.containsKey(unit)) {
        try {
          return Math.multiplyExact(Long.parseLong(match.group(1)), UNIT_US.get(unit)) / 1_000L;
        } catch (NumberFormatException | ArithmeticException e) {
          // out of a long's range: refused below
        }
      }
    }
    throw refuse(
        key,
        text,
        "a Spark time string: a whole number with a unit (us, ms, s, m, min, h, d; none is ms),"
            + " <= 0 to turn it off");
  }

  /** Spark's {@code booleanConf}: {@code true} or {@code false}, any case, trimmed. */
  private static boolean bool(String key, String text, boolean fallback) {
    if (text == null) {
      return fallback;
    }
    String value = text.trim().toLowerCase(Locale.ROOT);
    if (value.equals("true") || value.equals("false")) {
      return value.equals("true");
    }
    throw refuse(key, text, "true or false");
  }

  private static IllegalArgumentException refuse(String key, String value, String allowed) {
    return new IllegalArgumentException(
        "Spark conf " + key + " = '" + value + "' is not allowed; allowed: " + allowed);
  }
}
