package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/** A batch query's bounds, read as Spark's Kafka source reads them. */
class BatchBoundsTest {
  private static final SortedMap<Integer, Long> LATEST = new TreeMap<>(Map.of(0, 40L, 1, 30L));

  @Test
  void theBatchOptionsAreTakenOutWhateverTheirCase() {
    Map<String, String> options = new HashMap<>(Map.of("ENDINGoffsets", "latest", "topic", "t"));
    BatchBounds bounds = BatchBounds.take(options);
    assertEquals("latest", bounds.endingOffsets);
    assertFalse(bounds.startingGiven);
    assertEquals(Map.of("topic", "t"), options);
    BatchBounds none = BatchBounds.take(new HashMap<>(Map.of("startingOffsets", "earliest")));
    assertNull(none.endingOffsets);
    assertTrue(none.startingGiven);
  }

  @Test
  void endsAreTheLatestOffsetsOrSparksJsonWithMinusOneForLatest() {
    assertEquals(LATEST, BatchBounds.take(new HashMap<>()).ends("t", LATEST));
    BatchBounds json =
        BatchBounds.take(new HashMap<>(Map.of("endingOffsets", "{\"t\": {\"0\": 12, \"1\": -1}}")));
    assertEquals(new TreeMap<>(Map.of(0, 12L, 1, 30L)), json.ends("t", LATEST));
  }

  @Test
  void anEndAtEarliestOrMissingAPartitionIsRefusedByName() {
    BatchBounds earliest =
        BatchBounds.take(new HashMap<>(Map.of("endingOffsets", "{\"t\": {\"0\": -2, \"1\": 3}}")));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> earliest.ends("t", LATEST));
    assertTrue(e.getMessage().contains("partition 0 ends at -2"), e.getMessage());
    BatchBounds one =
        BatchBounds.take(new HashMap<>(Map.of("endingOffsets", "{\"t\": {\"0\": 3}}")));
    e = assertThrows(IllegalArgumentException.class, () -> one.ends("t", LATEST));
    assertTrue(e.getMessage().contains("name every one"), e.getMessage());
    BatchBounds word = BatchBounds.take(new HashMap<>(Map.of("endingOffsets", "earliest")));
    e = assertThrows(IllegalArgumentException.class, () -> word.ends("t", LATEST));
    assertTrue(e.getMessage().contains("cannot end at earliest"), e.getMessage());
  }
}
