package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;
import org.junit.jupiter.api.Test;

/**
 * {@link ShadedClassNames}: a user's {@code kafka.*} options name Kafka's classes as Spark's Kafka
 * source takes them ({@code org.apache.kafka...}); the shaded jar holds them under {@code
 * io.floodgate.shaded}.
 */
class ShadedClassNamesTest {
  private static final String PREFIX = "io.floodgate.shaded.";
  private static final String SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule";

  private static Map<String, String> relocated(String... keyValues) {
    Map<String, String> out = new LinkedHashMap<>();
    for (int i = 0; i < keyValues.length; i += 2) {
      out.put(keyValues[i], keyValues[i + 1]);
    }
    ShadedClassNames.relocate(out, PREFIX);
    return out;
  }

  @Test
  void theShadedPrefixIsReadFromKafkasOwnClassName() {
    assertEquals(
        PREFIX,
        ShadedClassNames.prefixOf(PREFIX + "org.apache.kafka.clients.consumer.KafkaConsumer"));
    assertEquals("", ShadedClassNames.prefixOf("org.apache.kafka.clients.consumer.KafkaConsumer"));
    assertEquals("", ShadedClassNames.PREFIX, "the unit tests run on unshaded classes");
  }

  @Test
  void unshadedNothingIsRewritten() {
    String jaas = SCRAM + " required username=\"u\" password=\"p\";";
    Map<String, String> out =
        ClientProperties.forJava(
            Map.of("sasl.mechanism", "SCRAM-SHA-256", "sasl.jaas.config", jaas));
    assertEquals(jaas, out.get("sasl.jaas.config"));
  }

  @Test
  void aJaasLoginModuleOfKafkaGetsThePrefixAndStaysValidJaas() {
    String jaas =
        SCRAM + " required username=\"alice\" password=\"a;b \\\"org.apache.kafka.X\\\" c\";";
    String out = relocated("sasl.jaas.config", jaas).get("sasl.jaas.config");
    assertEquals(PREFIX + jaas, out);
    AppConfigurationEntry entry =
        JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password(out)))
            .configurationEntries()
            .get(0);
    assertEquals(PREFIX + SCRAM, entry.getLoginModuleName());
    assertEquals("a;b \"org.apache.kafka.X\" c", entry.getOptions().get("password"));
  }

  @Test
  void eachJaasEntryIsMappedButAUsersOwnOrAnAlreadyShadedModuleIsNot() {
    String plain = "org.apache.kafka.common.security.plain.PlainLoginModule";
    String jaas =
        "com.example.Login required a=\"org.apache.kafka.Y\";\n  "
            + plain
            + " optional;"
            + PREFIX
            + SCRAM
            + " required;";
    assertEquals(
        "com.example.Login required a=\"org.apache.kafka.Y\";\n  "
            + PREFIX
            + plain
            + " optional;"
            + PREFIX
            + SCRAM
            + " required;",
        relocated("sasl.jaas.config", jaas).get("sasl.jaas.config"));
  }

  @Test
  void classOptionsAndClassListsAreMapped() {
    String oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler";
    Map<String, String> out =
        relocated(
            "sasl.login.callback.handler.class", oauth,
            "sasl.client.callback.handler.class", " com.example.Handler ",
            "config.providers.file.class",
                "org.apache.kafka.common.config.provider.FileConfigProvider",
            "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.RangeAssignor, com.example.Assignor,"
                    + " org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            "interceptor.classes", "",
            "client.id", "org.apache.kafka.looks.like.a.Class",
            "config.providers", "file");
    Map<String, String> expected = new HashMap<>();
    expected.put("sasl.login.callback.handler.class", PREFIX + oauth);
    expected.put("sasl.client.callback.handler.class", " com.example.Handler ");
    expected.put(
        "config.providers.file.class",
        PREFIX + "org.apache.kafka.common.config.provider.FileConfigProvider");
    expected.put(
        "partition.assignment.strategy",
        PREFIX
            + "org.apache.kafka.clients.consumer.RangeAssignor, com.example.Assignor,"
            + PREFIX
            + "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
    expected.put("interceptor.classes", "");
    expected.put("client.id", "org.apache.kafka.looks.like.a.Class");
    expected.put("config.providers", "file");
    assertEquals(expected, out);
  }

  /** Every class option of Kafka's clients' configs is known, so a new one is not missed. */
  @Test
  void everyClassOptionOfKafkasClientsIsMapped() {
    TreeSet<String> classes = new TreeSet<>();
    for (ConfigDef def :
        List.of(
            ConsumerConfig.configDef(),
            ProducerConfig.configDef(),
            AdminClientConfig.configDef())) {
      def.configKeys()
          .forEach(
              (name, key) -> {
                if (key.type == ConfigDef.Type.CLASS) {
                  classes.add(name);
                }
              });
    }
    assertTrue(ShadedClassNames.CLASSES.containsAll(classes), classes.toString());
  }
}
