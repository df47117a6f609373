package io.floodgate.spark.serde;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The registry client's options, retries, fail-over, credentials and references. */
class SchemaRegistryClientTest {
  private FakeSchemaRegistry registry;

  @BeforeEach
  void start() throws IOException {
    registry = new FakeSchemaRegistry();
    registry.register(7, ConfluentDecoderTest.READER.toString());
  }

  @AfterEach
  void stop() {
    registry.close();
  }

  private static String basic(String userInfo) {
    return "Basic " + Base64.getEncoder().encodeToString(userInfo.getBytes(StandardCharsets.UTF_8));
  }

  /** A loopback URL nothing listens on (a port just freed). */
  private static String deadUrl() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return "http://127.0.0.1:" + socket.getLocalPort();
    }
  }

  @Test
  void aRetriableStatusIsAskedAgainUpToMaxRetries() throws Exception {
    registry.failNext(503, 429);
    SchemaRegistryClient client =
        new SchemaRegistryClient(
            Map.of("url", registry.url(), "max.retries", "2", "retries.wait.ms", "0"));
    assertEquals(ConfluentDecoderTest.READER, client.schemaById(7, null));
    assertEquals(3, registry.requests.size());
  }

  @Test
  void aStatusThatIsNotRetriableIsNotAskedAgain() {
    registry.failNext(403);
    SchemaRegistryClient client =
        new SchemaRegistryClient(Map.of("url", registry.url(), "retries.wait.ms", "0"));
    SchemaRegistryException failed =
        assertThrows(SchemaRegistryException.class, () -> client.schemaById(7, null));
    assertTrue(failed.getMessage().contains("HTTP 403"), failed.getMessage());
    assertEquals(1, registry.requests.size());
  }

  @Test
  void theNextUrlIsAskedWhenOneDoesNotAnswer() throws Exception {
    SchemaRegistryClient client =
        new SchemaRegistryClient(
            Map.of("url", deadUrl() + "/," + registry.url(), "max.retries", "0"));
    assertEquals(ConfluentDecoderTest.READER, client.schemaById(7, "t-value"));
    assertEquals(List.of("/schemas/ids/7?subject=t-value"), registry.requests);
  }

  @Test
  void credentialsGoInTheAuthorizationHeaderAndNeverInErrors() throws Exception {
    registry.requireAuthorization(basic("fg:s3cr:et"));
    SchemaRegistryClient byOption =
        new SchemaRegistryClient(
            Map.of("url", registry.url(), "basic.auth.user.info", "fg:s3cr:et"));
    assertEquals(ConfluentDecoderTest.READER, byOption.schemaById(7, null));
    String inUrl = registry.url().replace("http://", "http://fg:s3cr%3Aet@");
    SchemaRegistryClient byUrl = new SchemaRegistryClient(Map.of("url", inUrl));
    assertEquals(ConfluentDecoderTest.READER, byUrl.schemaById(7, null));
    assertEquals(registry.url(), byUrl.url());

    SchemaRegistryClient wrong =
        new SchemaRegistryClient(Map.of("url", inUrl.replace("s3cr", "x"), "max.retries", "0"));
    SchemaRegistryException failed =
        assertThrows(SchemaRegistryException.class, () -> wrong.schemaById(7, null));
    assertTrue(failed.getMessage().contains("HTTP 401"), failed.getMessage());
    assertTrue(!failed.getMessage().contains("s3cr"), failed.getMessage());

    IllegalArgumentException both =
        assertThrows(
            IllegalArgumentException.class,
            () -> new SchemaRegistryClient(Map.of("url", inUrl, "basic.auth.user.info", "a:b")));
    assertTrue(both.getMessage().contains("give one of them"), both.getMessage());
  }

  @Test
  void aStaticBearerTokenIsSentWithItsCluster() throws Exception {
    registry.requireAuthorization("Bearer t0k");
    SchemaRegistryClient client =
        new SchemaRegistryClient(
            Map.of(
                "url", registry.url(),
                "bearer.auth.credentials.source", "STATIC_TOKEN",
                "bearer.auth.token", "t0k",
                "bearer.auth.logical.cluster", "lsrc-1"));
    assertEquals(ConfluentDecoderTest.READER, client.schemaById(7, null));
  }

  @Test
  void optionsTheClientDoesNotHaveAreRefusedByName() {
    Map<Map<String, String>, String> refused =
        Map.of(
            Map.of(), "schemaRegistry.url",
            Map.of("url", "registry:8081"), "http:// or https://",
            Map.of("url", "http://r:8081", "ssl.key.location", "/k.pem"),
                "schemaRegistry.ssl.key.location",
            Map.of("url", "http://r:8081", "auto.register.schemas", "true"),
                "schemaRegistry.auto.register.schemas",
            Map.of("url", "http://r:8081", "bearer.auth.credentials.source", "OAUTHBEARER"),
                "STATIC_TOKEN",
            Map.of("url", "http://r:8081", "max.retries", "-1"), "schemaRegistry.max.retries",
            Map.of("url", "http://r:8081", "timeout", "soon"), "schemaRegistry.timeout");
    refused.forEach(
        (conf, named) -> {
          IllegalArgumentException e =
              assertThrows(IllegalArgumentException.class, () -> new SchemaRegistryClient(conf));
          assertTrue(e.getMessage().startsWith("floodgate_kafka: "), e.getMessage());
          assertTrue(e.getMessage().contains(named), conf + ": " + e.getMessage());
        });
  }

  @Test
  void referencedSchemasAreParsedBeforeTheSchemaThatNamesThem() throws Exception {
    String carrier =
        "{\"type\":\"enum\",\"name\":\"Carrier\",\"namespace\":\"floodgate.flights\","
            + "\"symbols\":[\"AA\",\"UA\"]}";
    registry.registerWithReference(
        11,
        "{\"type\":\"record\",\"name\":\"Leg\",\"namespace\":\"floodgate.flights\","
            + "\"fields\":[{\"name\":\"carrier\",\"type\":\"Carrier\"}]}",
        "floodgate.flights.Carrier",
        "carrier value",
        carrier);
    SchemaRegistryClient client = new SchemaRegistryClient(Map.of("url", registry.url()));
    Schema leg = client.schemaById(11, null);
    assertEquals(Schema.Type.ENUM, leg.getField("carrier").schema().getType());
    assertEquals(
        List.of("/schemas/ids/11", "/subjects/carrier%20value/versions/1"), registry.requests);
  }

  @Test
  void aMissingReferenceIsNotFound() {
    registry.registerWithReference(
        12,
        "{\"type\":\"record\",\"name\":\"Leg\",\"fields\":[{\"name\":\"c\",\"type\":\"C\"}]}",
        "C",
        "gone",
        null);
    SchemaRegistryClient client = new SchemaRegistryClient(Map.of("url", registry.url()));
    assertThrows(SchemaRegistryClient.SchemaNotFound.class, () -> client.schemaById(12, null));
  }

  @Test
  void theClientOfAConfigurationIsSharedInTheJvm() {
    Map<String, String> conf = Map.of("url", registry.url(), "max.retries", "0");
    assertSame(SchemaRegistryClient.shared(conf), SchemaRegistryClient.shared(Map.copyOf(conf)));
  }
}
