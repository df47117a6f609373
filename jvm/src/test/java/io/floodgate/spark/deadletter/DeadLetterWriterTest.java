package io.floodgate.spark.deadletter;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.serde.TupleRejected;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * {@link DeadLetterWriter#send} on Kafka's {@code MockProducer}: what it sends, that a dead letter
 * the topic did not acknowledge fails the task naming how many, and that the producer is always
 * closed with a bounded timeout.
 */
class DeadLetterWriterTest {
  /** The wait for acknowledgements in the tests, ms: short, as nothing is sent over a network. */
  private static final long WAIT_MS = 10;

  /** Kafka's MockProducer that records how it was closed ({@code null}: without a timeout). */
  private static class Recording extends MockProducer<byte[], byte[]> {
    final List<Duration> closes = new ArrayList<>();

    Recording(boolean autoComplete) {
      super(autoComplete, new ByteArraySerializer(), new ByteArraySerializer());
    }

    @Override
    public void close() {
      closes.add(null);
      super.close();
    }

    @Override
    public void close(Duration timeout) {
      closes.add(timeout);
      super.close(timeout);
    }

    void assertClosedOnceWithin() {
      assertEquals(List.of(Duration.ofMillis(DeadLetterWriter.CLOSE_TIMEOUT_MS)), closes);
    }
  }

  /** A MockProducer whose every send fails as the broker would fail it. */
  private static final class Refusing extends Recording {
    Refusing() {
      super(false);
    }

    @Override
    public synchronized Future<RecordMetadata> send(
        ProducerRecord<byte[], byte[]> record, Callback callback) {
      Future<RecordMetadata> future = super.send(record, callback);
      errorNext(new RecordTooLargeException("too large for the dead-letter topic"));
      return future;
    }
  }

  private static DeadLetterWriter writerOfTwo() {
    DeadLetterWriter writer = new DeadLetterWriter("dlq", new Properties(), "flights", "q1");
    for (long offset = 7; offset <= 8; offset++) {
      writer.add(
          new ConsumerRecord<>("in", 3, offset, "k".getBytes(), "v".getBytes()),
          new TupleRejected("decode", "not Avro"));
    }
    return writer;
  }

  @Test
  void sentDeadLettersCarryTheTupleAndItsHeaders() {
    DeadLetterWriter writer = writerOfTwo();
    Recording producer = new Recording(true);
    writer.send(5L, () -> producer, WAIT_MS);

    assertEquals(2, producer.history().size());
    ProducerRecord<byte[], byte[]> first = producer.history().get(0);
    assertEquals("dlq", first.topic());
    assertArrayEquals(DeadLetterWriter.key("q1", "in", 3, 7), first.key());
    assertArrayEquals("v".getBytes(), first.value());
    assertEquals(
        "7",
        new String(first.headers().lastHeader("floodgate.offset").value(), StandardCharsets.UTF_8));
    assertEquals(0, writer.size(), "sent: nothing pending");
    producer.assertClosedOnceWithin();
  }

  @Test
  void aFailedSendFailsTheTaskNamingHowManyWereNotSent() {
    DeadLetterWriter writer = writerOfTwo();
    Refusing producer = new Refusing();
    DeadLettersUnsentException e =
        assertThrows(DeadLettersUnsentException.class, () -> writer.send(5L, () -> producer, 1000));
    assertEquals(2, e.unsent());
    assertEquals(2, e.total());
    assertTrue(
        e.getMessage().startsWith("FG-SOURCE-007 dead-letter topic 'dlq': 2 of 2"), e.getMessage());
    assertTrue(e.getCause() instanceof RecordTooLargeException, String.valueOf(e.getCause()));
    assertEquals(2, writer.size(), "not sent: still pending");
    producer.assertClosedOnceWithin();
  }

  @Test
  void deadLettersNotAcknowledgedInTimeFailTheTaskAndTheProducerClosesInBoundedTime() {
    DeadLetterWriter writer = writerOfTwo();
    Recording producer = new Recording(false); // the broker never answers
    DeadLettersUnsentException e =
        assertThrows(
            DeadLettersUnsentException.class, () -> writer.send(5L, () -> producer, WAIT_MS));
    assertEquals(2, e.unsent());
    assertTrue(e.getMessage().contains("not acknowledged within 10 ms"), e.getMessage());
    producer.assertClosedOnceWithin();
  }

  @Test
  void oneOfTwoAcknowledgedCountsOneUnsent() {
    DeadLetterWriter writer = writerOfTwo();
    Recording producer =
        new Recording(false) {
          private int sends;

          @Override
          public synchronized Future<RecordMetadata> send(
              ProducerRecord<byte[], byte[]> record, Callback callback) {
            Future<RecordMetadata> future = super.send(record, callback);
            if (sends++ == 0) {
              completeNext();
            }
            return future;
          }
        };
    DeadLettersUnsentException e =
        assertThrows(
            DeadLettersUnsentException.class, () -> writer.send(5L, () -> producer, WAIT_MS));
    assertEquals(1, e.unsent());
    assertEquals(2, e.total());
  }

  @Test
  void withoutATopicTheFirstRefusalFailsTheTask() {
    DeadLetterWriter writer = new DeadLetterWriter(null, new Properties(), "flights", null);
    TupleRejected why = new TupleRejected("decode", "not Avro");
    writer.add(new ConsumerRecord<>("in", 0, 1, null, "v".getBytes()), why);
    IllegalStateException e =
        assertThrows(
            IllegalStateException.class, () -> writer.send(5L, () -> new Recording(true), WAIT_MS));
    assertSame(why, e.getCause());
  }
}
