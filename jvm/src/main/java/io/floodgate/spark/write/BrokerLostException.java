package io.floodgate.spark.write;

/**
 * {@code FG-QG-008}: a write task's producer lost its broker connection during its transaction,
 * which is dropped; Spark's retry of the task writes its partition again with a new producer.
 */
public final class BrokerLostException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public BrokerLostException(String message) {
    super(message);
  }
}
