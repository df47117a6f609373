package io.floodgate.spark.serde;

/**
 * The Schema Registry could not be asked: no answer from any of its URLs after the retries, or an
 * answer that is neither a schema nor "not found" (401, 403, a 5xx, a body that is not the
 * registry's JSON). Unchecked, so it fails the task that asked and Spark retries the task: a tuple
 * is never dead-lettered for an outage (as Floodgate's Python codec, {@code
 * pipeline.serde.confluent.ConfluentCodec}, raises {@code pipeline.errors.SchemaRegistryError}
 * rather than a decoding error).
 */
public final class SchemaRegistryException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String url;

  /**
   * @param url the registry's URL(s) as configured, without credentials
   * @param message what failed, naming the URL
   * @param cause the network error, or {@code null}
   */
  public SchemaRegistryException(String url, String message, Throwable cause) {
    super(message, cause);
    this.url = url;
  }

  /** The registry's URL(s), without credentials. */
  public String url() {
    return url;
  }
}
