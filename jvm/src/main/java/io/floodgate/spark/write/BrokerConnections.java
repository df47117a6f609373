package io.floodgate.spark.write;

import java.util.Map;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;

/** What a producer's metrics tell of its broker connections. */
final class BrokerConnections {
  private BrokerConnections() {}

  /**
   * How many of its connections {@code producer} has seen closed so far (its {@code
   * producer-metrics} {@code connection-close-total}): by the broker going away, or by the producer
   * itself.
   */
  static double closed(Producer<?, ?> producer) {
    double total = 0;
    for (Map.Entry<MetricName, ? extends Metric> e : producer.metrics().entrySet()) {
      MetricName name = e.getKey();
      if (name.name().equals("connection-close-total")
          && name.group().equals("producer-metrics")
          && e.getValue().metricValue() instanceof Number n) {
        total += n.doubleValue();
      }
    }
    return total;
  }
}
