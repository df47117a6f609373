package io.floodgate.spark.swept;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Which object a BLOB row may name: {@code <blob_dir>/<name>}, as text (no store asked). */
class ObjectBlobsTest {
  private static final String DIR = "s3://swept/backlog";

  private static BlobRow row(String path, String blobDir) {
    return new BlobRow(7, "flights", 3, 100, 110, path, 1, 1, null, null, null, blobDir);
  }

  @Test
  void aNameInTheBlobDirectoryIsInside() {
    assertTrue(ObjectBlobs.inside(DIR + "/flights-3-100-110.avro", DIR));
    assertTrue(ObjectBlobs.inside(DIR + "/a.avro", DIR + "/"));
    assertTrue(ObjectBlobs.inside("s3a://swept/backlog/a.avro", "s3a://swept/backlog"));
  }

  @Test
  void anythingElseIsOutside() {
    assertFalse(ObjectBlobs.inside(DIR + "/../other/a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/sub/../a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/..", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/./a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "//a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/sub/a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/", DIR));
    assertFalse(ObjectBlobs.inside(DIR, DIR));
    assertFalse(ObjectBlobs.inside(DIR + "-other/a.avro", DIR));
    assertFalse(ObjectBlobs.inside("s3://other/backlog/a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/a.avro?versionId=1", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/a.avro", "s3://swept/x/../backlog"));
    assertFalse(ObjectBlobs.inside("gs://swept/backlog/a.avro", DIR));
    assertFalse(ObjectBlobs.inside("/var/blobs/a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/a.avro", "/var/blobs"));
    // As written, as pipeline.swept.registered.inside compares them: the scheme is part of the
    // text.
    assertFalse(ObjectBlobs.inside("s3a://swept/backlog/a.avro", DIR));
    assertFalse(ObjectBlobs.inside(DIR + "/a.avro", "s3a://swept/backlog"));
  }

  @Test
  void aRowOutsideIsRefusedWithItsDirectory() {
    BlobPathException e =
        assertThrows(
            BlobPathException.class, () -> BlobPaths.check(row(DIR + "/../x/a.avro", DIR)));
    assertEquals("outside", e.reason());
    assertEquals(DIR, e.blobDir());
    assertTrue(
        e.getMessage()
            .endsWith(
                "its file resolves to s3://swept/backlog/../x/a.avro, outside the BLOB directory"
                    + " s3://swept/backlog: not the sweeper's, neither read nor deleted"),
        e.getMessage());
    BlobPathException local =
        assertThrows(BlobPathException.class, () -> BlobPaths.check(row("/var/blobs/a.avro", DIR)));
    assertEquals("outside", local.reason());
    BlobPaths.check(row(DIR + "/a.avro", DIR));
  }

  @Test
  void s3IsReadAsS3a() {
    assertEquals("s3a://swept/backlog/a.avro", ObjectBlobs.hadoopPath(DIR + "/a.avro").toString());
    assertEquals("s3a://b/k.avro", ObjectBlobs.hadoopPath("s3a://b/k.avro").toString());
  }
}
