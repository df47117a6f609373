package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.options.SourceOptions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * {@link Subscription}: which topic-partitions are read, against a cluster's metadata (Kafka's
 * {@link MockConsumer}), as Spark's {@code ConsumerStrategy} answers it.
 */
class SubscriptionTest {
  private final MockConsumer<byte[], byte[]> cluster = new MockConsumer<>(OffsetResetStrategy.NONE);

  private void topic(String name, int partitions) {
    List<PartitionInfo> infos = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      infos.add(new PartitionInfo(name, p, null, null, null));
    }
    cluster.updatePartitions(name, infos);
  }

  private static Subscription of(String key, String value, String... more) {
    Map<String, String> options =
        new HashMap<>(Map.of("kafka.bootstrap.servers", "b:1", key, value));
    for (int i = 0; i + 1 < more.length; i += 2) {
      options.put(more[i], more[i + 1]);
    }
    return new Subscription(SourceOptions.parse(options));
  }

  private static List<String> names(Iterable<TopicPartition> tps) {
    List<String> out = new ArrayList<>();
    tps.forEach(tp -> out.add(tp.toString()));
    return out;
  }

  @Test
  void subscribeReadsEveryPartitionOfEachTopicInTopicThenPartitionOrder() {
    topic("runways", 1);
    topic("flights", 2);
    topic("other", 3);
    assertEquals(
        List.of("flights-0", "flights-1", "runways-0"),
        names(of("subscribe", "runways, flights").partitions(cluster)));
  }

  @Test
  void aSubscribedTopicThatDoesNotExistFailsByName() {
    topic("flights", 1);
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> of("subscribe", "flights,runways").partitions(cluster));
    assertTrue(e.getMessage().contains("topic 'runways' is not available"), e.getMessage());
  }

  @Test
  void assignReadsTheNamedPartitionsAndRefusesOnesATopicLacks() {
    topic("flights", 3);
    topic("runways", 1);
    assertEquals(
        List.of("flights-2", "runways-0"),
        names(of("assign", "{\"runways\": [0], \"flights\": [2]}").partitions(cluster)));
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> of("assign", "{\"runways\": [0, 4]}").partitions(cluster));
    assertTrue(e.getMessage().contains("assign names partitions [4] of 'runways'"), e.getMessage());
  }

  @Test
  void aPatternIsFoundInNamesAsSparksButNeverReadsInternalTopicsNorTheDeadLetterTopic() {
    topic("flights.eu", 2);
    topic("flights.us", 1);
    topic("xflights.eu", 1); // found in part of the name: read, as Spark's findFirstIn
    topic("runways", 1);
    topic("flights.dead", 1);
    topic("__consumer_offsets", 2);
    Subscription s =
        of(
            "subscribePattern",
            " (flights|__consumer)[._].* ",
            "deadLetterTopic",
            "flights.dead",
            "schema",
            "Flight",
            "schemas",
            "{}");
    assertEquals(
        List.of("flights.eu-0", "flights.eu-1", "flights.us-0", "xflights.eu-0"),
        names(s.partitions(cluster)));
    assertFalse(of("subscribePattern", "^flights[.].*$").matches("xflights.eu"));
    assertFalse(s.matches("__consumer_offsets"));
    assertFalse(s.matches("flights.dead"));
    assertTrue(s.matches("flights.new"));
  }

  @Test
  void aPatternSeesTopicsCreatedSinceTheLastLookAndMatchingNothingIsNoError() {
    Subscription s = of("subscribePattern", "flights-[0-9]+");
    topic("runways", 1);
    assertEquals(List.of(), names(s.partitions(cluster)));
    topic("flights-1", 1);
    assertEquals(List.of("flights-1-0"), names(s.partitions(cluster)));
    topic("flights-2", 2);
    topic("flights-1", 2); // a partition added
    assertEquals(
        List.of("flights-1-0", "flights-1-1", "flights-2-0", "flights-2-1"),
        names(s.partitions(cluster)));
  }
}
