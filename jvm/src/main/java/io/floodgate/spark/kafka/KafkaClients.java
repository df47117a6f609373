package io.floodgate.spark.kafka;

import io.floodgate.spark.options.SourceOptions;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;

/**
 * The Kafka client properties of the source's consumers and producers: the source's own, then the
 * user's {@code kafka.*} options (Spark's dialect; the Java client's property names), then what the
 * source must decide itself.
 *
 * <p>A query group passes its {@code [kafka] client} settings as {@code kafka.*} in librdkafka's
 * names, those of Floodgate's Python clients; they mostly match the Java client's, and the few that
 * differ are translated by {@link ClientProperties}.
 */
public final class KafkaClients {
  private KafkaClients() {}

  /** Properties of a consumer of the source: read committed, no auto commit, no topic creation. */
  public static Properties consumer(SourceOptions options, Map<String, String> extra) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrapServers);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, options.groupId);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    props.putAll(extra);
    props.putAll(ClientProperties.forJava(options.client));
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
    return props;
  }

  /** Properties of a producer (the dead letters): the cluster and its security only. */
  public static Properties producer(SourceOptions options) {
    return shared(options.bootstrapServers, options.client);
  }

  /**
   * The cluster {@code bootstrapServers} and, of the user's {@code client} properties (the {@code
   * kafka.*} options), those every kind of client takes ({@link ClientProperties#isShared}:
   * security, client id, connections, metadata).
   */
  public static Properties shared(String bootstrapServers, Map<String, String> client) {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrapServers);
    ClientProperties.forJava(client)
        .forEach(
            (k, v) -> {
              if (ClientProperties.isShared(k)) {
                props.put(k, v);
              }
            });
    return props;
  }
}
