package io.floodgate.spark.alignment;

import io.floodgate.spark.kafka.KafkaClients;
import io.floodgate.spark.options.SourceOptions;
import java.time.Duration;
import java.util.Map;

/** The event-time aligner of a source's options. */
public final class EventTimeAligners {
  /**
   * How long one read of the broker at planning may wait: a round of the probe's fetches (what it
   * did not answer by then is asked again, up to {@link #PATIENCE}), or one {@code offsetsForTimes}
   * of the time index.
   */
  static final Duration READ_TIMEOUT = Duration.ofSeconds(10);

  /**
   * How long planning asks again for event times the broker did not answer before the query fails
   * ({@link EventTimesUnansweredException}): the 60 s the source's offset reads wait.
   */
  static final Duration PATIENCE = Duration.ofSeconds(60);

  private EventTimeAligners() {}

  /**
   * The aligner of option {@code maxEventTimeDriftMs}: {@link EventTimeAligner#NONE} when it is not
   * set; else one that reads event times at planning, the Kafka timestamp with Kafka's time index
   * for the cuts ({@code timestampMode = server}), or the decoded {@code timestampField} with an
   * interpolation search ({@code data_source}). Its consumers connect on first use.
   *
   * @throws IllegalArgumentException {@code data_source} with {@code encoding = confluent} and
   *     {@code schemaRegistry.*} options the registry client refuses
   */
  public static EventTimeAligner of(SourceOptions options) {
    if (options.maxEventTimeDriftMs == null) {
      return EventTimeAligner.NONE;
    }
    RecordEventTime eventTime = RecordEventTime.of(options);
    EventTimeProbe probe =
        new EventTimeProbe(
            KafkaClients.consumer(options, Map.of()),
            options.describe(),
            eventTime,
            READ_TIMEOUT,
            PATIENCE);
    KafkaTimeIndex index =
        options.timestampMode.equals("server")
            ? new KafkaTimeIndex(
                KafkaClients.consumer(options, Map.of()), options.describe(), READ_TIMEOUT)
            : null;
    return new ProbingAligner(options.stream, options.maxEventTimeDriftMs, probe, index);
  }
}
