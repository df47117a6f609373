package io.floodgate.spark.swept;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The golden BLOBs the sweeper's writer made (tests/golden/blobs/, tests/golden/make_blobs.py) read
 * to the records expected.json lists, through the catalog catalog.sql makes, as the Python test
 * (tests/unit/pipeline/swept/test_golden_blob.py) reads them.
 */
class GoldenBlobTest {
  @TempDir Path tmp;

  private List<String> read(String catalogUrl, long start, long end, long logStart) {
    SweptRecords records =
        new SweptRanges(new SweepCatalogReader(catalogUrl))
            .read("flights", 3, start, end, logStart);
    List<String> out = new ArrayList<>();
    records.forEachRemaining(r -> out.add(Golden.asGolden(r)));
    return out;
  }

  @Test
  void theChainReadsToTheExpectedRecords() throws Exception {
    String url = Golden.catalog(tmp, Golden.DIR);
    assertEquals(Golden.expected(0, Long.MAX_VALUE), read(url, 100, 120, 120));
  }

  @Test
  void aRangeInsideTheChainReadsItsRecordsOnly() throws Exception {
    String url = Golden.catalog(tmp, Golden.DIR);
    SweptRecords records =
        new SweptRanges(new SweepCatalogReader(url)).read("flights", 3, 103, 117, 200);
    assertEquals(117, records.brokerFrom());
    List<String> got = new ArrayList<>();
    records.forEachRemaining(r -> got.add(Golden.asGolden(r)));
    assertEquals(Golden.expected(103, 117), got);
    assertEquals(got.size(), records.count());
  }

  @Test
  void theBrokerTakesOverAtItsLogStart() throws Exception {
    String url = Golden.catalog(tmp, Golden.DIR);
    SweptRecords records =
        new SweptRanges(new SweepCatalogReader(url)).read("flights", 3, 105, 130, 112);
    List<Long> offsets = new ArrayList<>();
    records.forEachRemaining(r -> offsets.add(r.offset()));
    assertEquals(List.of(105L, 106L, 108L, 109L, 110L, 111L), offsets);
    assertEquals(112, records.brokerFrom());
  }

  @Test
  void anOffsetInNoBlobIsDataLoss() throws Exception {
    String url = Golden.catalog(tmp, Golden.DIR);
    DataLossException e =
        assertThrows(
            DataLossException.class,
            () -> new SweptRanges(new SweepCatalogReader(url)).read("flights", 3, 99, 120, 150));
    assertEquals(
        "data loss on topic 'flights' partition 3, offsets [99, 120): offset 99 is neither in the"
            + " broker (log start 150) nor in any BLOB of the sweep catalog",
        e.getMessage());
    assertEquals(150L, e.availableFrom());
  }

  @Test
  void theSealsAreTheFilesAndTheCatalogRows() throws Exception {
    String url = Golden.catalog(tmp, Golden.DIR);
    List<BlobRow> rows = new SweepCatalogReader(url).covering("flights", 3, 0, Long.MAX_VALUE);
    JsonNode seals = Golden.json("seal.json").get("blobs");
    assertEquals(seals.size(), rows.size());
    for (int i = 0; i < rows.size(); i++) {
      BlobRow row = rows.get(i);
      JsonNode seal = seals.get(i);
      assertEquals(Golden.DIR.resolve(seal.get("file").asText()).toString(), row.path());
      assertEquals(seal.get("sha256").asText(), row.sha256());
      assertEquals(seal.get("bytes").asLong(), row.bytes());
      assertEquals(seal.get("tuples").asLong(), row.tuples());
      assertEquals(seal.get("first_offset").asLong(), row.firstOffset());
      assertEquals(seal.get("last_offset").asLong(), row.lastOffset());
      assertEquals(Golden.DIR.toString(), row.blobDir());
      try (var channel = java.nio.channels.FileChannel.open(Path.of(row.path()))) {
        assertEquals(row.sha256(), RegisteredBlob.sha256(channel));
      }
    }
  }

  @Test
  void aBlobDifferingFromItsSealIsRefusedBeforeItsRecords() throws Exception {
    Path blobs = Files.createDirectory(tmp.resolve("blobs"));
    for (JsonNode seal : Golden.json("seal.json").get("blobs")) {
      byte[] data = Files.readAllBytes(Golden.DIR.resolve(seal.get("file").asText()));
      if (seal.get("first_offset").asLong() == 110) {
        data[data.length - 20] ^= 0x01;
      }
      Files.write(blobs.resolve(seal.get("file").asText()), data);
    }
    String url = Golden.catalog(tmp, blobs);
    SweptRecords records =
        new SweptRanges(new SweepCatalogReader(url)).read("flights", 3, 100, 120, 120);
    List<Long> offsets = new ArrayList<>();
    BlobIntegrityException e =
        assertThrows(
            BlobIntegrityException.class,
            () -> records.forEachRemaining(r -> offsets.add(r.offset())));
    assertEquals("sha256", e.reason());
    assertEquals(2L, e.blobId());
    assertEquals(109L, offsets.get(offsets.size() - 1));
    assertTrue(e.getMessage().contains("fails its integrity check (sha256)"), e.getMessage());
    // Again on every later call: the damaged range is never taken as read.
    assertThrows(BlobIntegrityException.class, records::hasNext);
  }
}
