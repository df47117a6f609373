package io.floodgate.spark.write;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.Producer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Watches the producers of open transactions, and closes at once one that lost a broker connection,
 * before it can send a record again.
 *
 * <p>Why: noida-db 0.2.3, restarted during a transaction, drops the records it had, takes the
 * records a producer retries after its restart into a transaction its coordinator does not know
 * (which then stays open, holding back every {@code read_committed} reader, until its next start),
 * and commits the rest of the transaction, the batch marker included, without them. Kafka's Java
 * producer retries on its own sender thread as soon as the broker is back, whatever its task is
 * doing; so the watch runs beside it, every {@link #PERIOD_MS}, and closes it with no timeout
 * (nothing queued or in flight is sent again) as soon as its {@code connection-close-total} grows.
 * The task then fails ({@link BrokerLostException}), and Spark's retry writes its partition again
 * with a new producer. On Apache Kafka this costs one task attempt.
 */
final class ConnectionWatch {
  private static final Logger LOG = LoggerFactory.getLogger(ConnectionWatch.class);

  /** How often the open transactions' producers are looked at, ms. */
  static final long PERIOD_MS = 20;

  /** A producer in an open transaction, and whether the watch closed it. */
  static final class Watched {
    final Producer<?, ?> producer;
    final double closesAtBegin;
    final String what;
    final AtomicBoolean lost = new AtomicBoolean();

    Watched(Producer<?, ?> producer, String what) {
      this.producer = producer;
      this.closesAtBegin = BrokerConnections.closed(producer);
      this.what = what;
    }

    /** Whether a broker connection closed since the transaction began. */
    boolean connectionLost() {
      return lost.get() || BrokerConnections.closed(producer) > closesAtBegin;
    }
  }

  private static final Map<Watched, Boolean> OPEN = new ConcurrentHashMap<>();

  static {
    Thread watch = new Thread(ConnectionWatch::watchForever, "floodgate-sink-connection-watch");
    watch.setDaemon(true);
    watch.start();
  }

  private ConnectionWatch() {}

  /** Watch {@code producer} while its transaction is open ({@code what}: for the log). */
  static Watched open(Producer<?, ?> producer, String what) {
    Watched watched = new Watched(producer, what);
    OPEN.put(watched, Boolean.TRUE);
    return watched;
  }

  /** Its transaction ended: stop watching. */
  static void closed(Watched watched) {
    if (watched != null) {
      OPEN.remove(watched);
    }
  }

  private static void watchForever() {
    while (true) {
      try {
        Thread.sleep(PERIOD_MS);
      } catch (InterruptedException e) {
        return;
      }
      for (Watched watched : OPEN.keySet()) {
        try {
          if (!watched.lost.get() && watched.connectionLost()) {
            watched.lost.set(true);
            OPEN.remove(watched);
            LOG.warn(
                "FG-QG-008 {}: a broker connection closed during its transaction: its producer is"
                    + " closed, nothing of it sent again",
                watched.what);
            watched.producer.close(Duration.ZERO);
          }
        } catch (RuntimeException e) {
          LOG.debug("connection watch of {}", watched.what, e);
        }
      }
    }
  }
}
