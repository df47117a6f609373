package io.floodgate.spark.swept;

/**
 * One registered BLOB, a row of the catalog's {@code floodgate_blobs} with the catalog's BLOB
 * directory ({@code pipeline.swept.tables.Blob} in Python): {@code [startOffset, endOffset)} of a
 * topic partition and its seal.
 *
 * @param id {@code floodgate_blobs.id}
 * @param topic the topic
 * @param partition the partition
 * @param startOffset first offset of the range it holds
 * @param endOffset offset after the range it holds
 * @param path its file, absolute as the sweeper wrote it, or its object's URL {@code
 *     s3://bucket/prefix/<name>.avro} ({@link ObjectBlobs})
 * @param bytes the file's size in bytes
 * @param tuples how many Kafka records it holds (fewer than the range: transaction markers and
 *     aborted records take offsets)
 * @param sha256 SHA-256 of the whole file, 64 lowercase hex digits; {@code null}: registered before
 *     checksums
 * @param firstOffset offset of its first record, or {@code null} (none, or unsealed)
 * @param lastOffset offset of its last record, or {@code null} (none, or unsealed)
 * @param blobDir {@code floodgate_blob_store.blob_dir}: the directory every path must lie in, or
 *     the URL {@code s3://bucket/prefix} every object's is under; {@code null}: no sweeper recorded
 *     one
 */
public record BlobRow(
    long id,
    String topic,
    int partition,
    long startOffset,
    long endOffset,
    String path,
    long bytes,
    long tuples,
    String sha256,
    Long firstOffset,
    Long lastOffset,
    String blobDir) {}
