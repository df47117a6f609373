package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The driver's record of what an at-least-once query's committed batches wrote. */
class OutputLogTest {
  @TempDir Path checkpoint;

  private static TaskCommit task(int partition, long written, Map<Integer, Long> ends) {
    return new TaskCommit(partition, written, 0, 0, ends);
  }

  private OutputLog.Entry read(long batch) throws Exception {
    return OutputLog.Entry.parse(
        batch, Files.readString(checkpoint.resolve("floodgate/output/" + batch)));
  }

  @Test
  void eachBatchAddsItsTasksTuplesAndMovesTheEndsOfThePartitionsTheyWrote() throws Exception {
    OutputLog log = new OutputLog(checkpoint.toString(), new Configuration());
    log.record(0, new TaskCommit[] {task(0, 3, Map.of(0, 2L, 1, 1L)), task(1, 2, Map.of(1, 3L))});
    log.record(1, new TaskCommit[] {task(0, 4, Map.of(0, 6L)), task(1, 0, Map.of())});

    assertEquals(new OutputLog.Entry(0, 5, Map.of(0, 2L, 1, 3L)), read(0));
    assertEquals(new OutputLog.Entry(1, 9, Map.of(0, 6L, 1, 3L)), read(1));
  }

  @Test
  void entriesOlderThanSparksRetainedBatchesAreDeleted() throws Exception {
    OutputLog log = new OutputLog(checkpoint.toString(), new Configuration());
    for (long b = 0; b <= OutputLog.RETAINED + 1; b++) {
      log.record(b, new TaskCommit[] {task(0, 1, Map.of(0, b + 1))});
    }
    assertEquals(false, Files.exists(checkpoint.resolve("floodgate/output/0")));
    assertEquals(false, Files.exists(checkpoint.resolve("floodgate/output/1")));
    assertEquals(
        new OutputLog.Entry(OutputLog.RETAINED + 1, OutputLog.RETAINED + 2, Map.of(0, 102L)),
        read(OutputLog.RETAINED + 1));
  }

  @Test
  void aBatchRunAgainCountsItsLastRunOnlyAndARestartedDriverReadsTheEntryBefore() throws Exception {
    OutputLog first = new OutputLog(checkpoint.toString(), new Configuration());
    first.record(0, new TaskCommit[] {task(0, 5, Map.of(0, 5L))});
    first.record(1, new TaskCommit[] {task(0, 5, Map.of(0, 10L))});
    // The driver died before Spark's commit log of batch 1: a new one runs it again, and its 5
    // tuples land after the first run's (offsets 10-14).
    OutputLog again = new OutputLog(checkpoint.toString(), new Configuration());
    again.record(1, new TaskCommit[] {task(0, 5, Map.of(0, 15L))});

    OutputLog.Entry entry = read(1);
    assertEquals(new OutputLog.Entry(1, 10, Map.of(0, 15L)), entry);
    // 15 tuples in the output, 10 of them the committed runs': 5 written twice.
    assertEquals(5, entry.ends().get(0) - entry.written());
  }
}
