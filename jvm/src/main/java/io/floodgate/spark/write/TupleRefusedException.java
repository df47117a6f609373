package io.floodgate.spark.write;

/**
 * An output row the sink will not write: a value its output stream's schema does not take (the JVM
 * side of the Python sink's {@code SchemaError}, {@code pipeline/serde/codec.py}). The query fails
 * on it, as it does in Python: an output row is the query's own, so there is no dead letter to send
 * it to.
 *
 * <p>The message names the stream, the field, the value (as Python's {@code repr} shows it) and
 * what the field takes, in the words of {@code StreamCodec.normalise} (or fastavro's, for what
 * Python leaves to fastavro).
 */
public final class TupleRefusedException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String stream;
  private final String field;

  /**
   * @param stream the output stream
   * @param field the refused field
   * @param message the whole message, naming both
   */
  public TupleRefusedException(String stream, String field, String message) {
    super(message);
    this.stream = stream;
    this.field = field;
  }

  /** The output stream whose tuple was refused. */
  public String stream() {
    return stream;
  }

  /** The schema field whose value was refused. */
  public String field() {
    return field;
  }
}
