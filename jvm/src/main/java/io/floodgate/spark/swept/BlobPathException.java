package io.floodgate.spark.swept;

/**
 * A catalog row names a file that is not the sweeper's BLOB, so nothing is read from it (as the
 * Python reader of swept BLOBs refuses it, {@code pipeline.errors.BlobPathError}): {@code reason}
 * {@code outside} (the path, symbolic links resolved, is not inside the catalog's BLOB directory;
 * an object URL is not {@code <blob_dir>/<name>}, {@link ObjectBlobs#inside}) or {@code not-a-file}
 * (a symbolic link, a device, a FIFO, a folder, a prefix of objects).
 */
public class BlobPathException extends BlobIntegrityException {
  private static final long serialVersionUID = 1L;

  private final String blobDir;

  /**
   * @param message why the file is refused
   * @param blob the catalog row
   * @param blobDir the directory the path was checked against, or {@code null}
   * @param reason {@code outside} or {@code not-a-file}
   */
  public BlobPathException(String message, BlobRow blob, String blobDir, String reason) {
    super(message, blob, reason, null);
    this.blobDir = blobDir;
  }

  /** The BLOB directory the path was checked against ({@code null}: the catalog records none). */
  public String blobDir() {
    return blobDir;
  }
}
