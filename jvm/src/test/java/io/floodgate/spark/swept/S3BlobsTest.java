package io.floodgate.spark.swept;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.gaul.s3proxy.BlobStores;
import org.gaul.s3proxy.S3Proxy;
import org.gaul.s3proxy.auth.AuthenticationType;
import org.gaul.s3proxy.blobstore.BlobStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Swept BLOBs in a bucket, read through Hadoop's s3a connector (hadoop-aws with the AWS SDK's
 * modules, as scripts/s3a-jars resolves them) from a real S3 server: S3Proxy in this JVM over its
 * in-memory {@code transient} store, on a free loopback port. The golden BLOBs are uploaded through
 * s3a and read to expected.json's records, the same checks as on a local disk.
 */
class S3BlobsTest {
  private static final String BUCKET = "swept";
  private static final String ACCESS_KEY = "floodgate";
  private static final String SECRET_KEY = "floodgate-secret";

  /** How long S3Proxy may take to listen. */
  private static final long START_TIMEOUT_MS = 30_000;

  private static S3Proxy proxy;
  private static Configuration conf;

  @TempDir Path tmp;

  @BeforeAll
  static void startS3() throws Exception {
    BlobStore store = BlobStores.create("transient", new Properties());
    store.createContainer(BUCKET);
    proxy =
        S3Proxy.builder()
            .blobStore(store)
            .endpoint(URI.create("http://127.0.0.1:0"))
            .awsAuthentication(AuthenticationType.AWS_V2_OR_V4, ACCESS_KEY, SECRET_KEY)
            .build();
    proxy.start();
    long deadline = System.nanoTime() + START_TIMEOUT_MS * 1_000_000;
    while (!proxy.getState().equals("STARTED")) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("S3Proxy is " + proxy.getState() + " after 30 s");
      }
      Thread.sleep(10);
    }
    conf = new Configuration();
    // The keys a Spark user sets as spark.hadoop.fs.s3a.* (docs/spark-cluster.md).
    conf.set("fs.s3a.endpoint", "http://127.0.0.1:" + proxy.getPort());
    conf.set("fs.s3a.endpoint.region", "us-east-1");
    conf.set("fs.s3a.path.style.access", "true");
    conf.set("fs.s3a.connection.ssl.enabled", "false");
    conf.set("fs.s3a.access.key", ACCESS_KEY);
    conf.set("fs.s3a.secret.key", SECRET_KEY);
    conf.set(
        "fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider");
    conf.set("fs.s3a.attempts.maximum", "1");
    conf.set("fs.s3a.retry.limit", "1");
  }

  @AfterAll
  static void stopS3() throws Exception {
    FileSystem.closeAll();
    if (proxy != null) {
      proxy.stop();
    }
  }

  /** Uploads {@code data} as {@code s3://swept/<key>} through s3a. */
  private static void put(String key, byte[] data) throws IOException {
    org.apache.hadoop.fs.Path path = ObjectBlobs.hadoopPath("s3://" + BUCKET + "/" + key);
    try (OutputStream out = path.getFileSystem(conf).create(path, true)) {
      out.write(data);
    }
  }

  /**
   * The golden BLOBs under {@code prefix}, the one of offset {@code damaged} with a byte flipped.
   */
  private static void uploadGolden(String prefix, long damaged) throws IOException {
    for (JsonNode seal : Golden.json("seal.json").get("blobs")) {
      String file = seal.get("file").asText();
      byte[] data = Files.readAllBytes(Golden.DIR.resolve(file));
      if (seal.get("first_offset").asLong() == damaged) {
        data[data.length - 20] ^= 0x01;
      }
      put(prefix + "/" + file, data);
    }
  }

  private SweptRecords read(String catalogUrl, long start, long end, long logStart) {
    return new SweptRanges(new SweepCatalogReader(catalogUrl), conf)
        .read("flights", 3, start, end, logStart);
  }

  @Test
  void theGoldenChainInABucketReadsToTheExpectedRecords() throws Exception {
    uploadGolden("golden", -1);
    String url = Golden.catalog(tmp, "s3://" + BUCKET + "/golden");
    List<String> got = new ArrayList<>();
    read(url, 100, 120, 120).forEachRemaining(r -> got.add(Golden.asGolden(r)));
    assertEquals(Golden.expected(0, Long.MAX_VALUE), got);
  }

  @Test
  void aBlobWrittenHereReadsItsRecordsInOrderAsS3a() throws Exception {
    Path dir = Files.createDirectory(tmp.resolve("blobs"));
    BlobRow local =
        TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10, 11, 12}, new long[] {14});
    put("written/a.avro", Files.readAllBytes(Path.of(local.path())));
    BlobRow row = TestBlobs.at(local, "s3a://" + BUCKET + "/written/a.avro", "s3a://swept/written");
    List<String> keys = new ArrayList<>();
    try (RegisteredBlob blob = new RegisteredBlob(row, conf)) {
      blob.forEachRemaining(batch -> batch.forEach(r -> keys.add(new String(r.key()))));
    }
    assertEquals(List.of("k10", "k11", "k12", "k14"), keys);
  }

  @Test
  void aFlippedByteInTheObjectIsRefusedBeforeItsRecords() throws Exception {
    uploadGolden("damaged", 110);
    String url = Golden.catalog(tmp, "s3://" + BUCKET + "/damaged");
    SweptRecords records = read(url, 100, 120, 120);
    List<Long> offsets = new ArrayList<>();
    BlobIntegrityException e =
        assertThrows(
            BlobIntegrityException.class,
            () -> records.forEachRemaining(r -> offsets.add(r.offset())));
    assertEquals("sha256", e.reason());
    assertEquals(2L, e.blobId());
    assertEquals(109L, offsets.get(offsets.size() - 1));
    assertThrows(BlobIntegrityException.class, records::hasNext);
  }

  @Test
  void anObjectOutsideTheBlobDirectoryIsNeverRead() throws Exception {
    uploadGolden("golden", -1);
    BlobRow row =
        new SweepCatalogReader(Golden.catalog(tmp, "s3://" + BUCKET + "/golden"))
            .covering("flights", 3, 100, 110)
            .get(0);
    BlobRow escaped =
        TestBlobs.at(row, "s3://" + BUCKET + "/golden/../golden/" + name(row), row.blobDir());
    BlobPathException e =
        assertThrows(BlobPathException.class, () -> new RegisteredBlob(escaped, conf));
    assertEquals("outside", e.reason());
    BlobRow elsewhere = TestBlobs.at(row, row.path(), "s3://" + BUCKET + "/other");
    assertEquals(
        "outside",
        assertThrows(BlobPathException.class, () -> new RegisteredBlob(elsewhere, conf)).reason());
  }

  @Test
  void aMissingObjectOrAPrefixIsNotABlob() throws Exception {
    uploadGolden("golden", -1);
    BlobRow row =
        new SweepCatalogReader(Golden.catalog(tmp, "s3://" + BUCKET + "/golden"))
            .covering("flights", 3, 100, 110)
            .get(0);
    BlobRow missing = TestBlobs.at(row, "s3://" + BUCKET + "/golden/gone.avro", row.blobDir());
    assertEquals(
        "missing",
        assertThrows(BlobIntegrityException.class, () -> new RegisteredBlob(missing, conf))
            .reason());
    put("golden/sub/x.avro", new byte[] {1});
    BlobRow prefix = TestBlobs.at(row, "s3://" + BUCKET + "/golden/sub", row.blobDir());
    assertEquals(
        "not-a-file",
        assertThrows(BlobPathException.class, () -> new RegisteredBlob(prefix, conf)).reason());
    BlobRow resized = TestBlobs.withSeal(row, row.bytes() + 1, row.tuples(), 100L, 109L);
    assertEquals(
        "size",
        assertThrows(BlobIntegrityException.class, () -> new RegisteredBlob(resized, conf))
            .reason());
  }

  @Test
  void anObjectWithoutAHadoopConfigurationIsNotRead() throws Exception {
    BlobRow row =
        new BlobRow(
            1, "flights", 3, 100, 110, "s3://swept/golden/a.avro", 1, 1, null, null, null, null);
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> new RegisteredBlob(row));
    assertTrue(e.getMessage().contains("no Hadoop conf"), e.getMessage());
  }

  @Test
  void noS3aConnectorIsAConfigurationErrorNamingTheJars() throws Exception {
    Configuration without = new Configuration(conf);
    without.set("fs.s3a.impl", "org.example.NoSuchFileSystem");
    without.setBoolean("fs.s3a.impl.disable.cache", true);
    BlobRow row =
        new BlobRow(
            1, "flights", 3, 100, 110, "s3://swept/golden/a.avro", 1, 1, null, null, null, null);
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> new RegisteredBlob(row, without));
    assertTrue(e.getMessage().contains("no s3a connector"), e.getMessage());
    assertTrue(e.getMessage().contains("scripts/s3a-jars"), e.getMessage());
  }

  private static String name(BlobRow row) {
    return row.path().substring(row.path().lastIndexOf('/') + 1);
  }
}
