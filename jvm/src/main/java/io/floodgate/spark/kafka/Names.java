package io.floodgate.spark.kafka;

import java.util.UUID;

/**
 * The Kafka names the executors derive, the JVM twin of {@code pipeline/names.py}: both are held to
 * {@code tests/golden/contract/names.json}. The driver (Python) derives the rest and passes them as
 * options: a query's consumer group, its sink's {@code transactionalIdPrefix}, the dead-letter
 * topic.
 */
public final class Names {
  /** The consumer group a source without {@code group.id} makes up starts so, as Spark's. */
  public static final String SOURCE_GROUP_ID_PREFIX = "spark-kafka-source";

  private Names() {}

  /**
   * A consumer group of its own for a source that names none: {@code groupIdPrefix} (default
   * {@value #SOURCE_GROUP_ID_PREFIX}), a dash and a random UUID, as Spark's Kafka source makes one.
   */
  public static String sourceGroupId(String groupIdPrefix) {
    return (groupIdPrefix != null ? groupIdPrefix : SOURCE_GROUP_ID_PREFIX)
        + "-"
        + UUID.randomUUID();
  }

  /** The {@code transactional.id} of write task {@code task}'s producer: the prefix, a dot, it. */
  public static String taskTransactionalId(String transactionalIdPrefix, int task) {
    return transactionalIdPrefix + "." + task;
  }

  /**
   * The consumer group an exactly-once sink commits the input offsets its committed output covers
   * to, in each batch's transactions: the sink's prefix and {@code .input}.
   */
  public static String inputMarkerGroupId(String transactionalIdPrefix) {
    return transactionalIdPrefix + ".input";
  }
}
