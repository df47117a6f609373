package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.options.SourceOptions;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ClientProperties#forJava} and {@link KafkaClients}: the librdkafka settings Floodgate's
 * configs use ({@code [kafka] client}: {@code security.protocol}, {@code sasl.mechanism}, {@code
 * sasl.username}, {@code sasl.password}, {@code ssl.*}; docs/kafka-engines.md, the SASL tests) as
 * the Java client's properties.
 */
class ClientPropertiesTest {
  private static final String CERT =
      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  private static final String KEY =
      "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

  @TempDir Path dir;

  private static Map<String, String> map(String... keyValues) {
    Map<String, String> out = new LinkedHashMap<>();
    for (int i = 0; i < keyValues.length; i += 2) {
      out.put(keyValues[i], keyValues[i + 1]);
    }
    return out;
  }

  /** The JAAS login module {@code text} configures, as Kafka's client reads it. */
  private static AppConfigurationEntry jaas(String text) {
    JaasContext context =
        JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password(text)));
    assertEquals(1, context.configurationEntries().size());
    return context.configurationEntries().get(0);
  }

  @Test
  void saslPlainAsFloodgatesConfigsWriteIt() {
    // pipeline.brokers.apache_kafka.cluster.client_config, docs/kafka-engines.md
    Map<String, String> java =
        ClientProperties.forJava(
            map(
                "security.protocol", "SASL_PLAINTEXT",
                "sasl.mechanism", "PLAIN",
                "sasl.username", "alice",
                "sasl.password", "al1ce-pw"));
    assertEquals("SASL_PLAINTEXT", java.get("security.protocol"));
    assertEquals("PLAIN", java.get("sasl.mechanism"));
    assertFalse(java.containsKey("sasl.username"));
    assertFalse(java.containsKey("sasl.password"));
    AppConfigurationEntry entry = jaas(java.get("sasl.jaas.config"));
    assertEquals(
        "org.apache.kafka.common.security.plain.PlainLoginModule", entry.getLoginModuleName());
    assertEquals(Map.of("username", "alice", "password", "al1ce-pw"), entry.getOptions());
  }

  @Test
  void scramFromLibrdkafkasPluralMechanismsAndAPasswordThatNeedsEscaping() {
    Map<String, String> java =
        ClientProperties.forJava(
            map(
                "security.protocol", "SASL_SSL",
                "sasl.mechanisms", "SCRAM-SHA-512",
                "sasl.username", "bob",
                "sasl.password", "p\"a\\ss; x=y"));
    assertEquals("SCRAM-SHA-512", java.get("sasl.mechanism"));
    assertFalse(java.containsKey("sasl.mechanisms"));
    AppConfigurationEntry entry = jaas(java.get("sasl.jaas.config"));
    assertEquals(
        "org.apache.kafka.common.security.scram.ScramLoginModule", entry.getLoginModuleName());
    assertEquals("p\"a\\ss; x=y", entry.getOptions().get("password"));
  }

  @Test
  void withoutAMechanismUsernameAndPasswordArePlainAsInLibrdkafka() {
    Map<String, String> java =
        ClientProperties.forJava(map("sasl.username", "u", "sasl.password", "p"));
    assertEquals(
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        jaas(java.get("sasl.jaas.config")).getLoginModuleName());
  }

  @Test
  void theJavaClientsOwnNamesWin() {
    String own =
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"x\" password=\"y\";";
    Map<String, String> java =
        ClientProperties.forJava(
            map(
                "sasl.username", "u",
                "sasl.password", "p",
                "sasl.jaas.config", own,
                "sasl.mechanisms", "SCRAM-SHA-256",
                "sasl.mechanism", "PLAIN",
                "fetch.wait.max.ms", "10",
                "fetch.max.wait.ms", "20"));
    assertEquals(own, java.get("sasl.jaas.config"));
    assertEquals("PLAIN", java.get("sasl.mechanism"));
    assertEquals("20", java.get("fetch.max.wait.ms"));
  }

  @Test
  void oauthbearerTakesNoUsernameOrPassword() {
    Map<String, String> java =
        ClientProperties.forJava(
            map("sasl.mechanism", "OAUTHBEARER", "sasl.username", "u", "sasl.password", "p"));
    assertEquals(Map.of("sasl.mechanism", "OAUTHBEARER"), java);
  }

  @Test
  void aCaFileIsAPemTruststore() throws IOException {
    Path ca = Files.writeString(dir.resolve("ca.pem"), CERT);
    Map<String, String> java =
        ClientProperties.forJava(map("security.protocol", "SSL", "ssl.ca.location", ca.toString()));
    assertEquals(
        map(
            "security.protocol", "SSL",
            "ssl.truststore.type", "PEM",
            "ssl.truststore.location", ca.toString()),
        java);
  }

  @Test
  void aCaDirectoryIsItsCertificatesAndProbeIsTheJvmsTrust() throws IOException {
    Path cas = Files.createDirectory(dir.resolve("cas"));
    Files.writeString(cas.resolve("b.pem"), CERT.replace("MIIB", "BBBB"));
    Files.writeString(cas.resolve("a.crt"), CERT.replace("MIIB", "AAAA"));
    Files.writeString(cas.resolve("README"), "not a certificate");
    Map<String, String> java = ClientProperties.forJava(map("ssl.ca.location", cas.toString()));
    String pem = java.get("ssl.truststore.certificates");
    assertEquals("PEM", java.get("ssl.truststore.type"));
    assertTrue(pem.indexOf("AAAA") < pem.indexOf("BBBB") && pem.indexOf("AAAA") > 0, pem);
    assertFalse(pem.contains("not a certificate"));
    assertEquals(Map.of(), ClientProperties.forJava(map("ssl.ca.location", "probe")));
    assertEquals(
        Map.of("ssl.truststore.type", "PEM", "ssl.truststore.certificates", CERT),
        ClientProperties.forJava(map("ssl.ca.pem", CERT)));
  }

  @Test
  void aClientCertificateAndKeyAreAPemKeystore() throws IOException {
    Path cert = Files.writeString(dir.resolve("client.pem"), CERT);
    Path key = Files.writeString(dir.resolve("client.key"), KEY);
    Map<String, String> java =
        ClientProperties.forJava(
            map(
                "ssl.certificate.location",
                cert.toString(),
                "ssl.key.location",
                key.toString(),
                "ssl.key.password",
                "kp",
                "ssl.endpoint.identification.algorithm",
                "none"));
    assertEquals(
        map(
            "ssl.key.password", "kp",
            "ssl.endpoint.identification.algorithm", "",
            "ssl.keystore.type", "PEM",
            "ssl.keystore.certificate.chain", CERT,
            "ssl.keystore.key", KEY),
        java);
    assertEquals(
        java.get("ssl.keystore.key"),
        ClientProperties.forJava(map("ssl.certificate.pem", CERT, "ssl.key.pem", KEY))
            .get("ssl.keystore.key"));
  }

  @Test
  void aCertificateWithoutItsKeyOrAnUnreadableFileIsRefused() throws IOException {
    Path cert = Files.writeString(dir.resolve("client.pem"), CERT);
    IllegalArgumentException alone =
        assertThrows(
            IllegalArgumentException.class,
            () -> ClientProperties.forJava(map("ssl.certificate.location", cert.toString())));
    assertTrue(alone.getMessage().contains("go together"), alone.getMessage());
    String missing = dir.resolve("missing.key").toString();
    IllegalArgumentException unreadable =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                ClientProperties.forJava(
                    map("ssl.certificate.location", cert.toString(), "ssl.key.location", missing)));
    assertTrue(
        unreadable.getMessage().contains("'kafka.ssl.key.location'"), unreadable.getMessage());
    assertTrue(unreadable.getMessage().contains(missing), unreadable.getMessage());
  }

  @Test
  void aPkcs12KeystoreKeepsItsType() {
    assertEquals(
        map(
            "ssl.keystore.location",
            "/k.p12",
            "ssl.keystore.password",
            "s",
            "ssl.keystore.type",
            "PKCS12"),
        ClientProperties.forJava(
            map("ssl.keystore.location", "/k.p12", "ssl.keystore.password", "s")));
    assertEquals(
        "JKS",
        ClientProperties.forJava(map("ssl.keystore.location", "/k.jks", "ssl.keystore.type", "JKS"))
            .get("ssl.keystore.type"));
  }

  @Test
  void librdkafkaOnlyTuningIsDroppedAndSharedNamesPass() {
    Map<String, String> java =
        ClientProperties.forJava(
            map(
                "queued.min.messages", "10000",
                "fetch.queue.backoff.ms", "10",
                "statistics.interval.ms", "5000",
                "fetch.wait.max.ms", "10",
                "client.id", "fg",
                "fetch.min.bytes", "1",
                "session.timeout.ms", "45000"));
    assertEquals(
        map(
            "fetch.max.wait.ms", "10",
            "client.id", "fg",
            "fetch.min.bytes", "1",
            "session.timeout.ms", "45000"),
        java);
  }

  @Test
  void theClientsGetJavaNamesOnlyAndTheSourcesOwnSettings() throws IOException {
    Path ca = Files.writeString(dir.resolve("ca.pem"), CERT);
    SourceOptions options =
        SourceOptions.parse(
            map(
                "kafka.bootstrap.servers", "broker:9093",
                "subscribe", "flights",
                "kafka.group.id", "g",
                "kafka.security.protocol", "SASL_SSL",
                "kafka.sasl.mechanism", "SCRAM-SHA-256",
                "kafka.sasl.username", "alice",
                "kafka.sasl.password", "pw",
                "kafka.ssl.ca.location", ca.toString(),
                "kafka.queued.min.messages", "10",
                "kafka.fetch.wait.max.ms", "10",
                "kafka.session.timeout.ms", "30000"));
    Properties consumer = KafkaClients.consumer(options, Map.of("max.poll.records", "500"));
    for (String key : consumer.stringPropertyNames()) {
      assertTrue(ConsumerConfig.configNames().contains(key), key);
    }
    assertEquals("g", consumer.get("group.id"));
    assertEquals("false", consumer.get("enable.auto.commit"));
    assertEquals("none", consumer.get("auto.offset.reset"));
    assertEquals("read_committed", consumer.get("isolation.level"));
    assertEquals("30000", consumer.get("session.timeout.ms"));
    // Every value of its type (the readers give the deserializers to the consumer itself).
    consumer.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    consumer.put(
        "value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    new ConsumerConfig(consumer);

    Properties producer = KafkaClients.producer(options);
    for (String key : producer.stringPropertyNames()) {
      assertTrue(ProducerConfig.configNames().contains(key), key);
    }
    assertEquals("SASL_SSL", producer.get("security.protocol"));
    assertTrue(producer.getProperty("sasl.jaas.config").contains("ScramLoginModule"));
    assertEquals(ca.toString(), producer.get("ssl.truststore.location"));
    assertFalse(producer.containsKey("session.timeout.ms"));
    producer.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    producer.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    new ProducerConfig(producer);
  }
}
