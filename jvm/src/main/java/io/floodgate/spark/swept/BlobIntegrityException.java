package io.floodgate.spark.swept;

/**
 * A registered BLOB is not what the sweeper wrote: its size, SHA-256, record count or offsets
 * differ from its catalog row, or the file is missing or cannot be parsed (its message worded as
 * that of {@code pipeline.errors.BlobIntegrityError}, which the Python reader of swept BLOBs raises
 * for the same damage). The reader stops at this BLOB; {@link #start()} and {@link #end()} are the
 * BLOB's registered range.
 */
public class BlobIntegrityException extends DataLossException {
  private static final long serialVersionUID = 1L;

  private final Long blobId;
  private final String path;
  private final String reason;
  private final Long offset;

  /**
   * @param message what differs
   * @param blob the catalog row
   * @param reason {@code missing}, {@code size}, {@code sha256}, {@code offset}, {@code count},
   *     {@code unreadable} ({@code pipeline.swept.registered.DAMAGE_REASONS}), or a {@link
   *     BlobPathException}'s
   * @param offset the first offset found wrong, or {@code null}
   */
  public BlobIntegrityException(String message, BlobRow blob, String reason, Long offset) {
    super(
        "BLOB "
            + blob.id()
            + " ("
            + blob.path()
            + ") fails its integrity check ("
            + reason
            + "): "
            + message,
        blob.topic(),
        blob.partition(),
        blob.startOffset(),
        blob.endOffset(),
        null);
    this.blobId = blob.id();
    this.path = blob.path();
    this.reason = reason;
    this.offset = offset;
  }

  /** The BLOB's id in the catalog ({@code floodgate_blobs.id}). */
  public Long blobId() {
    return blobId;
  }

  /** The BLOB file as the catalog names it. */
  public String path() {
    return path;
  }

  /** What differs: one of the stable words listed for the constructor's {@code reason}. */
  public String reason() {
    return reason;
  }

  /** The first offset found wrong, or {@code null} when the check is not about one. */
  public Long offset() {
    return offset;
  }
}
