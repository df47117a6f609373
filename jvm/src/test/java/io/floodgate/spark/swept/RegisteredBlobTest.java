package io.floodgate.spark.swept;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A registered BLOB is read only if it is what its catalog row says (the checks
 * tests/unit/pipeline/swept/test_integrity.py makes of the Python reader): each failed check is a
 * {@link BlobIntegrityException} with the reason the Python reader gives ({@code
 * pipeline.swept.registered.DAMAGE_REASONS}).
 */
class RegisteredBlobTest {
  @TempDir Path tmp;
  Path dir;

  @BeforeEach
  void blobDir() throws Exception {
    dir = Files.createDirectory(tmp.resolve("blobs"));
  }

  private static List<Long> offsets(RegisteredBlob blob) {
    List<Long> out = new ArrayList<>();
    blob.forEachRemaining(batch -> batch.forEach(r -> out.add(r.offset())));
    return out;
  }

  private static String reason(BlobRow row) {
    return assertThrows(BlobIntegrityException.class, () -> offsets(new RegisteredBlob(row)))
        .reason();
  }

  @Test
  void aSealedBlobReadsItsRecordsInOrder() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10, 11, 12}, new long[] {14});
    RegisteredBlob blob = new RegisteredBlob(row);
    List<ConsumerRecord<byte[], byte[]>> first = blob.next();
    assertEquals("k11", new String(first.get(1).key()));
    assertEquals("v12", new String(first.get(2).value()));
    assertEquals(1_700_000_000_010L, first.get(0).timestamp());
    assertEquals(List.of(14L), blob.next().stream().map(ConsumerRecord::offset).toList());
    assertFalse(blob.hasNext());
  }

  @Test
  void anUnsealedBlobIsReadWithTheOtherChecks() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10, 11, 12});
    assertEquals(List.of(10L, 11L, 12L), offsets(new RegisteredBlob(TestBlobs.unsealed(row))));
    BlobRow miscounted = TestBlobs.withSeal(TestBlobs.unsealed(row), row.bytes(), 4, null, null);
    assertEquals("count", reason(miscounted));
  }

  @Test
  void eachDifferenceFromTheRowHasItsReason() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10, 11, 12});
    assertEquals("size", reason(TestBlobs.withSeal(row, row.bytes() + 1, 3, 10L, 12L)));
    assertEquals("count", reason(TestBlobs.withSeal(row, row.bytes(), 4, 10L, 12L)));
    assertEquals("offset", reason(TestBlobs.withSeal(row, row.bytes(), 3, 9L, 12L)));
    assertEquals("offset", reason(TestBlobs.withSeal(row, row.bytes(), 3, 10L, 13L)));
    byte[] data = Files.readAllBytes(Path.of(row.path()));
    data[data.length - 20] ^= 0x01;
    Files.write(Path.of(row.path()), data);
    assertEquals("sha256", reason(row));
  }

  @Test
  void offsetsOutOfOrderOrOutsideTheRangeAreRefused() throws Exception {
    BlobRow backwards =
        TestBlobs.write(dir, "b.avro", 10, 20, new long[] {10, 12}, new long[] {11});
    BlobIntegrityException e =
        assertThrows(BlobIntegrityException.class, () -> offsets(new RegisteredBlob(backwards)));
    assertEquals("offset", e.reason());
    assertEquals(11L, e.offset());
    assertTrue(e.getMessage().contains("offset 11 after 12 is not strictly increasing"));
    BlobRow past = TestBlobs.write(dir, "c.avro", 10, 20, new long[] {18, 20});
    assertEquals("offset", reason(past));
  }

  @Test
  void aFileThatIsNotABlobIsUnreadable() throws Exception {
    Schema other =
        new Schema.Parser()
            .parse(
                "{\"type\":\"record\",\"name\":\"Other\",\"fields\":[{\"name\":\"x\",\"type\":\"int\"}]}");
    Path path = dir.resolve("other.avro");
    try (DataFileWriter<GenericRecord> writer =
        new DataFileWriter<>(new GenericDatumWriter<GenericRecord>(other))) {
      writer.create(other, path.toFile());
      GenericRecord r = new GenericData.Record(other);
      r.put("x", 1);
      writer.append(r);
    }
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10});
    BlobRow named = TestBlobs.at(TestBlobs.unsealed(row), path.toString(), dir.toString());
    assertEquals("unreadable", reason(TestBlobs.withSeal(named, Files.size(path), 1, null, null)));
    Files.write(path, new byte[] {1, 2, 3});
    assertEquals("unreadable", reason(TestBlobs.withSeal(named, 3, 1, null, null)));
  }

  @Test
  void aMissingFileIsMissing() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10});
    Files.delete(Path.of(row.path()));
    assertEquals("missing", reason(row));
  }

  @Test
  void aPathOutsideTheBlobDirectoryIsNotOpened() throws Exception {
    Path elsewhere = Files.createDirectory(tmp.resolve("elsewhere"));
    BlobRow row = TestBlobs.write(elsewhere, "a.avro", 10, 20, new long[] {10});
    BlobPathException e =
        assertThrows(
            BlobPathException.class,
            () -> new RegisteredBlob(TestBlobs.at(row, row.path(), dir.toString())));
    assertEquals("outside", e.reason());
    assertEquals(dir.toString(), e.blobDir());
    // Through a link inside the directory, or '..': resolved first.
    Path link = Files.createSymbolicLink(dir.resolve("a.avro"), Path.of(row.path()));
    assertEquals("outside", reason(TestBlobs.at(row, link.toString(), dir.toString())));
    String dotted = dir + "/../elsewhere/a.avro";
    assertEquals("outside", reason(TestBlobs.at(row, dotted, dir.toString())));
    // The directory itself is not inside it.
    assertEquals("outside", reason(TestBlobs.at(row, dir.toString(), dir.toString())));
  }

  @Test
  void aLinkOrAFifoInsideTheDirectoryIsNotAFile() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10});
    Path link = Files.createSymbolicLink(dir.resolve("link.avro"), Path.of(row.path()));
    BlobIntegrityException e =
        assertThrows(
            BlobIntegrityException.class,
            () -> new RegisteredBlob(TestBlobs.at(row, link.toString(), dir.toString())));
    assertInstanceOf(BlobPathException.class, e);
    assertEquals("not-a-file", e.reason());
    Path fifo = dir.resolve("fifo.avro");
    Process mkfifo = new ProcessBuilder("mkfifo", fifo.toString()).start();
    assumeTrue(mkfifo.waitFor() == 0, "mkfifo is not available");
    BlobIntegrityException f =
        assertThrows(
            BlobPathException.class,
            () -> new RegisteredBlob(TestBlobs.at(row, fifo.toString(), dir.toString())));
    assertTrue(f.getMessage().contains("mode prw"), f.getMessage());
  }

  @Test
  void afterAFailureEveryCallFailsAgain() throws Exception {
    BlobRow row = TestBlobs.write(dir, "a.avro", 10, 20, new long[] {10, 11}, new long[] {12});
    RegisteredBlob blob = new RegisteredBlob(TestBlobs.withSeal(row, row.bytes(), 4, 10L, 12L));
    assertEquals(2, blob.next().size());
    assertEquals(1, blob.next().size());
    assertThrows(BlobIntegrityException.class, blob::hasNext);
    assertThrows(BlobIntegrityException.class, blob::next);
  }
}
