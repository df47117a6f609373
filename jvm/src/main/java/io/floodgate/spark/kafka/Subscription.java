package io.floodgate.spark.kafka;

import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.options.OptionText;
import io.floodgate.spark.options.SourceOptions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.internals.Topic;

/**
 * Which topic-partitions the source reads now, as Spark's Kafka source's {@code ConsumerStrategy}
 * answers it ({@code SubscribeStrategy}, {@code SubscribePatternStrategy}, {@code AssignStrategy}):
 * asked again at every planning, so that partitions added to a topic and, with {@code
 * subscribePattern}, topics created that match are read from then on.
 *
 * <ul>
 *   <li>{@code topic}/{@code subscribe}: every partition of each named topic; a named topic that
 *       does not exist fails the planning;
 *   <li>{@code subscribePattern}: every partition of each topic of the cluster in whose name the
 *       pattern is found ({@code Pattern.matcher(name).find()}, as Spark's Admin-based strategy's
 *       {@code findFirstIn}; anchor it to match whole names), except Kafka's internal topics
 *       ({@link Topic#isInternal}: {@code __consumer_offsets}, {@code __transaction_state}) and the
 *       source's own {@code deadLetterTopic}; none matching is no topic-partition, not an error;
 *   <li>{@code assign}: the named partitions, each of which must exist.
 * </ul>
 */
public final class Subscription {
  private static final Duration METADATA_TIMEOUT = Duration.ofSeconds(30);

  private final SourceOptions options;
  private final Pattern pattern;

  public Subscription(SourceOptions options) {
    this.options = options;
    this.pattern = options.topicPattern != null ? Pattern.compile(options.topicPattern) : null;
  }

  /**
   * Whether {@code topic} is one a pattern subscription reads: the pattern is found in its name, it
   * is not internal, it is not the dead-letter topic.
   */
  public boolean matches(String topic) {
    return pattern != null
        && pattern.matcher(topic).find()
        && !Topic.isInternal(topic)
        && !topic.equals(options.deadLetterTopic);
  }

  /**
   * The topic-partitions read now, in {@link TopicPartitions#ORDER}.
   *
   * @param consumer a consumer of the cluster (its metadata only is read)
   * @throws IllegalStateException a named topic does not exist
   * @throws IllegalArgumentException {@code assign} names partitions a topic does not have
   */
  public SortedSet<TopicPartition> partitions(Consumer<?, ?> consumer) {
    SortedSet<TopicPartition> out = new TreeSet<>(TopicPartitions.ORDER);
    if (pattern != null) {
      Map<String, List<PartitionInfo>> all = consumer.listTopics(METADATA_TIMEOUT);
      all.forEach(
          (topic, infos) -> {
            if (matches(topic)) {
              infos.forEach(i -> out.add(new TopicPartition(topic, i.partition())));
            }
          });
      return out;
    }
    for (String topic : options.topics) {
      TreeSet<Integer> existing = partitionsOf(consumer, topic);
      List<Integer> wanted = options.assigned != null ? options.assigned.get(topic) : null;
      if (wanted == null) {
        existing.forEach(p -> out.add(new TopicPartition(topic, p)));
        continue;
      }
      TreeSet<Integer> absent = new TreeSet<>(wanted);
      absent.removeAll(existing);
      if (!absent.isEmpty()) {
        throw OptionText.refuse(
            "assign names partitions "
                + absent
                + " of '"
                + topic
                + "', which has partitions "
                + existing);
      }
      wanted.forEach(p -> out.add(new TopicPartition(topic, p)));
    }
    return out;
  }

  private static TreeSet<Integer> partitionsOf(Consumer<?, ?> consumer, String topic) {
    List<PartitionInfo> infos = consumer.partitionsFor(topic, METADATA_TIMEOUT);
    if (infos == null || infos.isEmpty()) {
      throw new IllegalStateException("topic '" + topic + "' is not available: unknown topic");
    }
    TreeSet<Integer> all = new TreeSet<>();
    infos.forEach(i -> all.add(i.partition()));
    return all;
  }
}
