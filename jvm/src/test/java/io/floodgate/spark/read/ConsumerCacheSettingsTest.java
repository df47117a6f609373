package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** Spark's {@code spark.kafka.consumer.cache.*} settings, as Spark's connector reads them. */
class ConsumerCacheSettingsTest {
  private static ConsumerCacheSettings of(Map<String, String> conf) {
    return ConsumerCacheSettings.from(conf::get);
  }

  @Test
  void unsetKeysAreSparksDefaults() {
    assertEquals(new ConsumerCacheSettings(64, 300_000, 60_000, false), of(Map.of()));
    assertEquals(ConsumerCacheSettings.DEFAULTS, of(Map.of()));
  }

  @Test
  void valuesAreSparksTypes() {
    ConsumerCacheSettings s =
        of(
            Map.of(
                ConsumerCacheSettings.CAPACITY, " 8 ",
                ConsumerCacheSettings.TIMEOUT, "2MIN",
                ConsumerCacheSettings.EVICTOR_INTERVAL, "1500us",
                ConsumerCacheSettings.JMX, "True"));
    assertEquals(new ConsumerCacheSettings(8, 120_000, 1, true), s);
    assertEquals(250, of(Map.of(ConsumerCacheSettings.TIMEOUT, "250")).timeoutMs(), "ms");
  }

  @Test
  void nonPositiveTimesTurnTheEvictorOff() {
    assertTrue(ConsumerCacheSettings.DEFAULTS.evicts());
    assertFalse(of(Map.of(ConsumerCacheSettings.EVICTOR_INTERVAL, "-1")).evicts());
    assertFalse(of(Map.of(ConsumerCacheSettings.TIMEOUT, "0s")).evicts());
  }

  @Test
  void badValuesAreRefusedNamingTheKeyAndWhatIsAllowed() {
    Map<String, String> bad =
        Map.of(
            ConsumerCacheSettings.CAPACITY, "many",
            ConsumerCacheSettings.TIMEOUT, "5 minutes",
            ConsumerCacheSettings.EVICTOR_INTERVAL, "1w",
            ConsumerCacheSettings.JMX, "yes");
    Map<String, String> allowed =
        Map.of(
            ConsumerCacheSettings.CAPACITY, "a whole number >= 0",
            ConsumerCacheSettings.TIMEOUT, "a Spark time string",
            ConsumerCacheSettings.EVICTOR_INTERVAL, "a Spark time string",
            ConsumerCacheSettings.JMX, "true or false");
    bad.forEach(
        (key, value) -> {
          IllegalArgumentException e =
              assertThrows(IllegalArgumentException.class, () -> of(Map.of(key, value)));
          assertTrue(e.getMessage().contains(key + " = '" + value + "'"), e.getMessage());
          assertTrue(e.getMessage().contains("allowed: " + allowed.get(key)), e.getMessage());
        });
    IllegalArgumentException negative =
        assertThrows(
            IllegalArgumentException.class, () -> of(Map.of(ConsumerCacheSettings.CAPACITY, "-1")));
    assertTrue(negative.getMessage().contains("'-1'"), negative.getMessage());
  }
}
