package io.floodgate.spark.serde;

/**
 * A tuple the source does not pass on: it does not decode, or a rule refuses it. Its {@link
 * #reason()} is the {@code floodgate.reason} header of its dead-letter record, one of the reasons
 * docs/reference/codes.md lists ("Dead letters"; {@code bad-marker, unknown-fingerprint, bad-body,
 * unknown-schema-id, bad-magic-byte, bad-key, null-key, future-event-time, late, bad-value}), by
 * which the ledger counts dead letters ({@code pipeline.queues.ledger}).
 */
public final class TupleRejected extends Exception {
  private static final long serialVersionUID = 1L;
  private final String reason;
  private final String detail;

  /**
   * @param reason the stable, machine-readable reason
   * @param detail what is wrong, for a person
   */
  public TupleRejected(String reason, String detail) {
    super(detail, null, false, false);
    this.reason = reason;
    this.detail = detail;
  }

  public TupleRejected(String reason, String detail, Throwable cause) {
    super(detail, cause, false, false);
    this.reason = reason;
    this.detail = detail;
  }

  public String reason() {
    return reason;
  }

  public String detail() {
    return detail;
  }

  /**
   * The {@code floodgate.error} header: {@code stream '<s>': <detail> (topic '<t>', partition <p>,
   * offset <o>)}.
   */
  public String describe(String stream, String topic, int partition, long offset) {
    return "stream '"
        + stream
        + "': "
        + detail
        + " (topic '"
        + topic
        + "', partition "
        + partition
        + ", offset "
        + offset
        + ")";
  }
}
