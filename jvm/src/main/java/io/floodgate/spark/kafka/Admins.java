package io.floodgate.spark.kafka;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;

/**
 * This JVM's admin clients, one per cluster and client settings, shared by the source's and the
 * sink's tasks and closed at exit: an admin client holds a connection and a thread, and the markers
 * and logs it reads and writes ({@code listConsumerGroupOffsets}, {@code
 * alterConsumerGroupOffsets}) are a few small requests a batch.
 */
public final class Admins {
  private static final Map<String, Admin> ADMINS = new HashMap<>();

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(Admins::closeAll, "floodgate-admins-close"));
  }

  private Admins() {}

  /**
   * The admin client of cluster {@code bootstrapServers} with the user's {@code client} properties
   * (the {@code kafka.*} options; only the cluster's and its security's are used, {@link
   * KafkaClients#shared}), made on first use.
   */
  public static Admin of(String bootstrapServers, Map<String, String> client) {
    String key = bootstrapServers + "|" + client;
    synchronized (ADMINS) {
      return ADMINS.computeIfAbsent(
          key, k -> Admin.create(KafkaClients.shared(bootstrapServers, client)));
    }
  }

  private static void closeAll() {
    synchronized (ADMINS) {
      ADMINS.values().forEach(a -> a.close(Duration.ofSeconds(1)));
      ADMINS.clear();
    }
  }
}
