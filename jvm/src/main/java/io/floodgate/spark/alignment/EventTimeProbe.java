package io.floodgate.spark.alignment;

import io.floodgate.spark.offsets.TopicPartitions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads the event time of the tuple at an offset, for planning ({@link AlignmentPlan}), and caches
 * it.
 *
 * <p>One consumer, assigned every partition it has probed and paused between reads: a read seeks
 * and resumes the partitions it needs, so their fetches travel in one request to each broker (a
 * planning step costs one round trip, not one per partition), and a paused partition is not fetched
 * in the background between plannings (records fetched there would cost the broker and be thrown
 * away at the next seek). It never long-polls ({@code fetch.max.wait.ms} = 10, against the
 * consumer's default of 500: a planning waits for each round of reads) and asks for {@link
 * #PROBE_FETCH_BYTES} a partition.
 *
 * <p>A partition the broker does not answer for (a broker restarting, a leader moving) is asked
 * again, with a {@code FG-SOURCE-003} warning, for up to the probe's patience; then {@link #many}
 * throws {@link EventTimesUnansweredException}. It never answers "no event time" for it: a
 * partition without one holds nobody back, and the others would be read past its tuples, which
 * would then come late (after a broker's kill -9, 89 of 3 000 tuples were dead-lettered as late).
 *
 * <p>Not thread-safe: the driver's planning thread uses it.
 */
public final class EventTimeProbe implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(EventTimeProbe.class);

  /**
   * Tuples a read keeps of a partition's fetch, from the offset asked on (they fill the cache): an
   * event-time search aims its guesses half that below its estimate, so that they straddle the cut
   * ({@link KnownEventTimes#readAhead}). On the flights, an interpolated guess from a range's ends
   * fell 50-80 offsets past the cut: 64 tuples missed it as often as not, 256 hold it.
   */
  public static final int PROBE_BATCH = 256;

  /**
   * Bytes a read's fetch asks for of a partition: {@link #PROBE_BATCH} flights are ~16 KiB, the
   * fetch holds ~1 000.
   */
  public static final int PROBE_FETCH_BYTES = 64 * 1024;

  /** Event times cached per partition, most recent offsets kept. */
  public static final int CACHE_PER_PARTITION = 4096;

  private final String topic;
  private final RecordEventTime eventTime;
  private final Duration timeout;
  private final Duration patience;
  private final Supplier<Consumer<byte[], byte[]>> consumers;
  private Consumer<byte[], byte[]> consumer;
  private final Set<TopicPartition> assigned = new HashSet<>();
  private final Map<TopicPartition, TreeMap<Long, Long>> cache = new HashMap<>();

  /** The last stable offset per partition the planning works below: nothing is read at or past. */
  private Map<TopicPartition, Long> limits = Map.of();

  private long reads;

  /**
   * @param consumerProperties a consumer of the cluster (read committed, never subscribing, never
   *     committing: {@code KafkaClients.consumer}); the probe's own fetch settings go on top
   * @param topic the topics read, for messages (names joined by {@code ,}, or the pattern)
   * @param eventTime a record's event time
   * @param timeout how long one read may wait for the broker
   * @param patience how long {@link #many} asks again for what the broker did not answer
   */
  public EventTimeProbe(
      Properties consumerProperties,
      String topic,
      RecordEventTime eventTime,
      Duration timeout,
      Duration patience) {
    this(consumer(consumerProperties), topic, eventTime, timeout, patience);
  }

  /**
   * A probe reading with the consumer {@code consumers} makes on first use (tests pass Kafka's
   * {@code MockConsumer}).
   */
  EventTimeProbe(
      Supplier<Consumer<byte[], byte[]>> consumers,
      String topic,
      RecordEventTime eventTime,
      Duration timeout,
      Duration patience) {
    this.consumers = consumers;
    this.topic = topic;
    this.eventTime = eventTime;
    this.timeout = timeout;
    this.patience = patience;
  }

  /** A consumer of {@code consumerProperties} with the probe's {@link #settings()} on top. */
  private static Supplier<Consumer<byte[], byte[]>> consumer(Properties consumerProperties) {
    Properties properties = new Properties();
    properties.putAll(consumerProperties);
    properties.putAll(settings());
    return () ->
        new KafkaConsumer<>(properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  /**
   * The probe's consumer settings, over the user's: never wait, fetch little. The whole response is
   * capped too ({@code fetch.max.bytes}, four partitions' worth): on the embedded broker, which
   * sends more than {@code max.partition.fetch.bytes} a partition (a poll returns {@code
   * max.poll.records} of one), a planning's first read of the flights took 1.3-1.5 s without the
   * cap and 0.3 s with it. On Apache Kafka a read of more than four partitions may then take more
   * than one fetch.
   */
  static Map<String, String> settings() {
    return Map.of(
        ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG,
        "10",
        ConsumerConfig.FETCH_MIN_BYTES_CONFIG,
        "1",
        ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG,
        Integer.toString(PROBE_FETCH_BYTES),
        ConsumerConfig.FETCH_MAX_BYTES_CONFIG,
        Integer.toString(PROBE_FETCH_BYTES * 4),
        ConsumerConfig.MAX_POLL_RECORDS_CONFIG,
        Integer.toString(PROBE_BATCH * 16));
  }

  /**
   * Set the offsets the planning works below (its last stable offsets). Where a partition's limit
   * moved, the offsets cached as holding no tuple before the old limit (markers, aborted writes up
   * to it) are forgotten: a tuple may follow them now.
   */
  public void limit(Map<TopicPartition, Long> latest) {
    cache.forEach(
        (p, cached) -> {
          if (!latest.getOrDefault(p, 0L).equals(limits.getOrDefault(p, 0L))) {
            cached.values().removeIf(Objects::isNull);
          }
        });
    this.limits = Map.copyOf(latest);
  }

  /** Rounds of reads of the broker made (for tests and the planning's cost). */
  public long reads() {
    return reads;
  }

  /**
   * The event time of the tuple at each {@code {partition: offset}}; for an offset that holds no
   * tuple (a transaction marker, an aborted write), the next tuple's; {@code null} when there is
   * none before the limit ({@link #limit}) or the broker no longer holds it (swept, deleted). What
   * is not cached is read at once, in one round of fetches for all partitions; what the broker did
   * not answer, again, until the patience is spent.
   *
   * @return the event time (epoch ms, or {@code null}) of every partition asked
   * @throws EventTimesUnansweredException the broker did not answer for some partitions within the
   *     patience
   */
  public Map<TopicPartition, Long> many(Map<TopicPartition, Long> wanted) {
    Map<TopicPartition, Long> found = new HashMap<>();
    Map<TopicPartition, Long> missing = TopicPartitions.empty();
    for (Map.Entry<TopicPartition, Long> e : wanted.entrySet()) {
      TreeMap<Long, Long> cached = cache.get(e.getKey());
      if (cached != null && cached.containsKey(e.getValue())) {
        found.put(e.getKey(), cached.get(e.getValue()));
      } else if (e.getValue() < 0 || e.getValue() >= limits.getOrDefault(e.getKey(), 0L)) {
        found.put(e.getKey(), null);
      } else {
        missing.put(e.getKey(), e.getValue());
      }
    }
    long started = System.nanoTime();
    for (int attempt = 1; !missing.isEmpty(); attempt++) {
      reads++;
      Map<TopicPartition, Long> answered = fetch(missing);
      found.putAll(answered);
      answered.keySet().forEach(missing::remove);
      if (missing.isEmpty()) {
        break;
      }
      Duration waited = Duration.ofNanos(System.nanoTime() - started);
      if (waited.compareTo(patience) >= 0) {
        throw new EventTimesUnansweredException(topic, missing, waited);
      }
      LOG.warn(
          "FG-SOURCE-003 source of topic {}: broker not answering, reading the event times at {}"
              + " again (attempt {}, {} s so far)",
          topic,
          missing,
          attempt,
          waited.toSeconds());
    }
    return found;
  }

  /** The cached event times of {@code {partition: offset}}; offsets not cached are left out. */
  public Map<TopicPartition, Long> known(Map<TopicPartition, Long> wanted) {
    Map<TopicPartition, Long> found = new HashMap<>();
    for (Map.Entry<TopicPartition, Long> e : wanted.entrySet()) {
      TreeMap<Long, Long> cached = cache.get(e.getKey());
      if (cached != null && cached.containsKey(e.getValue())) {
        found.put(e.getKey(), cached.get(e.getValue()));
      }
    }
    return found;
  }

  /**
   * The cached event times of a partition's offsets in {@code [from, to)} ({@link
   * KnownEventTimes#between}), in offset order; a map that allows {@code null} values.
   */
  public NavigableMap<Long, Long> between(TopicPartition partition, long from, long to) {
    TreeMap<Long, Long> cached = cache.get(partition);
    if (cached == null || from >= to) {
      return new TreeMap<>();
    }
    return new TreeMap<>(cached.subMap(from, true, to, false));
  }

  /**
   * Drop cached offsets that are read already ({@code < begin[p] - 1}). The one at {@code begin[p]
   * - 1} is kept: it is the head of a partition read up to its high watermark, whose event time the
   * next planning asks for again as long as no tuple arrives, so that a partition whose head did
   * not move is not read again. What is at or past {@code begin[p]} (the cut, the planned end, the
   * tuples read with them) is the next planning's to start from.
   */
  public void forgetBefore(Map<TopicPartition, Long> begin) {
    cache.forEach((p, cached) -> cached.headMap(begin.getOrDefault(p, 0L) - 1).clear());
  }

  private Consumer<byte[], byte[]> consumer() {
    if (consumer == null) {
      consumer = consumers.get();
    }
    return consumer;
  }

  /**
   * Read the first tuples at each {@code {partition: offset}}: seek, resume, poll until every
   * partition has records or has moved to its limit (markers, aborted writes), pause.
   *
   * @return the event times of the partitions the broker answered for within the timeout
   */
  private Map<TopicPartition, Long> fetch(Map<TopicPartition, Long> missing) {
    Consumer<byte[], byte[]> c = consumer();
    Map<TopicPartition, Long> open = new HashMap<>(missing);
    if (!assigned.containsAll(open.keySet())) {
      assigned.addAll(open.keySet());
      c.assign(assigned);
      c.pause(assigned);
    }
    open.forEach(c::seek);
    c.resume(open.keySet());
    Map<TopicPartition, Long> found = new HashMap<>();
    long deadline = System.nanoTime() + timeout.toNanos();
    try {
      while (!open.isEmpty()) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          break;
        }
        ConsumerRecords<byte[], byte[]> records;
        try {
          records = c.poll(Duration.ofNanos(left));
        } catch (OffsetOutOfRangeException e) {
          // Swept (the sweeper truncated the topic behind its BLOBs) or deleted: a tuple the
          // broker no longer holds has no known event time and caps nothing.
          for (TopicPartition tp : e.partitions()) {
            if (open.remove(tp) != null) {
              found.put(tp, null);
              c.pause(List.of(tp));
            }
          }
          continue;
        }
        List<TopicPartition> done = new ArrayList<>();
        for (TopicPartition tp : records.partitions()) {
          Long offset = open.get(tp);
          if (offset != null) {
            found.put(tp, remember(tp, offset, records.records(tp)));
            done.add(tp);
          }
        }
        for (Map.Entry<TopicPartition, Long> e : open.entrySet()) {
          if (!done.contains(e.getKey())
              && position(c, e.getKey(), deadline) >= limits.getOrDefault(e.getKey(), 0L)) {
            // Nothing but markers or aborted writes up to the limit: no tuple to tell.
            found.put(e.getKey(), remember(e.getKey(), e.getValue(), List.of()));
            done.add(e.getKey());
          }
        }
        c.pause(done);
        done.forEach(open::remove);
      }
    } finally {
      c.pause(c.assignment());
    }
    return found; // what is still open, the broker did not answer in time
  }

  /** The consumer's position in {@code tp}; {@code -1} when the broker did not tell by then. */
  private static long position(Consumer<byte[], byte[]> c, TopicPartition tp, long deadlineNanos) {
    try {
      return c.position(tp, Duration.ofNanos(Math.max(0, deadlineNanos - System.nanoTime())));
    } catch (TimeoutException e) {
      return -1;
    }
  }

  /** Cache the event times of {@code records} read at {@code offset}; the one at it. */
  private Long remember(
      TopicPartition partition, long offset, List<ConsumerRecord<byte[], byte[]>> records) {
    TreeMap<Long, Long> cached = cache.computeIfAbsent(partition, p -> new TreeMap<>());
    Long at = null;
    boolean seen = false;
    int kept = 0;
    for (ConsumerRecord<byte[], byte[]> r : records) {
      if (r.offset() < offset) {
        continue;
      }
      Long time = eventTime.of(r);
      cached.put(r.offset(), time);
      if (!seen) {
        at = time;
        seen = true;
      }
      if (++kept >= PROBE_BATCH) {
        break;
      }
    }
    // Offsets without a tuple (markers) take the event time of the next tuple.
    cached.put(offset, at);
    for (Iterator<Long> it = cached.keySet().iterator();
        cached.size() > CACHE_PER_PARTITION && it.hasNext(); ) {
      it.next();
      it.remove();
    }
    return at;
  }

  @Override
  public void close() {
    if (consumer != null) {
      consumer.close(Duration.ofSeconds(5));
      consumer = null;
    }
  }
}
