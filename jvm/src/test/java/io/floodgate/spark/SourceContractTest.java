package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.deadletter.DeadLetterWriter;
import io.floodgate.spark.kafka.KafkaClients;
import io.floodgate.spark.options.SourceOptions;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

/**
 * The source's names and settings against {@code tests/golden/contract/source.json}, the
 * specification edited by hand in review (tests/golden/README.md): the source's name, the consumer
 * group it makes up, the dead letter's headers, key and producer, and which consumer settings a
 * {@code kafka.*} option may change.
 */
class SourceContractTest {
  private static final JsonNode CONTRACT = Golden.read("contract/source.json");
  private static final Map<String, String> MINIMAL =
      Map.of("kafka.bootstrap.servers", "b:1", "subscribe", "t");

  @Test
  void theSourceIsFoundByTheSameName() {
    assertEquals(CONTRACT.get("source_name").asText(), new FloodgateKafkaProvider().shortName());
  }

  @Test
  void aConsumerGroupMadeUpIsSparksPrefixAndAUuid() {
    String prefix = CONTRACT.get("group_id_prefix").asText();
    String group = SourceOptions.parse(MINIMAL).groupId;
    assertTrue(group.startsWith(prefix), group);
    assertEquals(prefix.length() + 36, group.length(), group);
  }

  @Test
  void deadLettersCarryTheSameHeadersInOrderAndTheSameKey() {
    List<String> headers = new ArrayList<>();
    CONTRACT.get("dead_letter").get("headers").forEach(h -> headers.add(h.asText()));
    assertEquals(headers, DeadLetterWriter.HEADERS);
    for (JsonNode k : CONTRACT.get("dead_letter").get("keys")) {
      byte[] key =
          DeadLetterWriter.key(
              k.get("query").isNull() ? null : k.get("query").asText(),
              k.get("topic").asText(),
              k.get("partition").asInt(),
              k.get("offset").asLong());
      assertEquals(k.get("key").asText(), new String(key, StandardCharsets.UTF_8));
    }
    Map<String, String> producer = new HashMap<>();
    CONTRACT
        .get("dead_letter")
        .get("producer")
        .fields()
        .forEachRemaining(e -> producer.put(e.getKey(), e.getValue().asText()));
    assertEquals(producer, DeadLetterWriter.PRODUCER);
  }

  @Test
  void theConsumerForcesAndDefaultsWhatTheContractSays() {
    JsonNode consumer = CONTRACT.get("consumer");
    Properties plain = KafkaClients.consumer(SourceOptions.parse(MINIMAL), Map.of());
    consumer
        .get("forced")
        .fields()
        .forEachRemaining(
            e -> {
              assertEquals(e.getValue().asText(), plain.getProperty(e.getKey()), e.getKey());
              Properties given = withUsers(e.getKey());
              if (given != null) { // refused, or overridden by the source
                assertEquals(e.getValue().asText(), given.getProperty(e.getKey()), e.getKey());
              }
            });
    consumer
        .get("defaults")
        .fields()
        .forEachRemaining(
            e -> {
              assertEquals(e.getValue().asText(), plain.getProperty(e.getKey()), e.getKey());
              assertEquals("users", withUsers(e.getKey()).getProperty(e.getKey()), e.getKey());
            });
  }

  /** The consumer's properties with {@code kafka.<key>=users}; null when the option is refused. */
  private static Properties withUsers(String key) {
    Map<String, String> options = new HashMap<>(MINIMAL);
    options.put("kafka." + key, "users");
    try {
      return KafkaClients.consumer(SourceOptions.parse(options), Map.of());
    } catch (IllegalArgumentException refused) {
      return null;
    }
  }
}
