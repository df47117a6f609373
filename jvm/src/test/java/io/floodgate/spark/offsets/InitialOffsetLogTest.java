package io.floodgate.spark.offsets;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import java.util.SortedMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The first offsets' file is Spark's {@code KafkaSourceInitialOffsetWriter}'s, byte for byte. */
class InitialOffsetLogTest {
  private static final SortedMap<TopicPartition, Long> OFFSETS =
      TopicPartitions.sorted(
          Map.of(new TopicPartition("t", 0), 7L, new TopicPartition("t", 1), 3L));

  @TempDir Path dir;

  private InitialOffsetLog log() {
    return new InitialOffsetLog(dir.resolve("sources/0").toString(), new Configuration());
  }

  @Test
  void theFileIsAZeroByteAVersionLineAndTheOffsetsJson() throws IOException {
    log().getOrCreate(() -> OFFSETS);
    byte[] expected = ("\0v1\n{\"t\": {\"0\": 7, \"1\": 3}}").getBytes(StandardCharsets.UTF_8);
    assertArrayEquals(expected, Files.readAllBytes(dir.resolve("sources/0/0")));
  }

  @Test
  void offsetsWrittenAreReadBackAndNotPlannedAgain() {
    assertEquals(OFFSETS, log().getOrCreate(() -> OFFSETS));
    assertEquals(
        OFFSETS,
        log()
            .getOrCreate(
                () -> {
                  throw new AssertionError("planned again");
                }));
  }

  @Test
  void noFileIsEmpty() {
    assertEquals(Optional.empty(), log().read());
  }

  @Test
  void theFileOfSpark21WithoutAVersionLineIsRead() throws IOException {
    Files.createDirectories(dir.resolve("sources/0"));
    Files.writeString(dir.resolve("sources/0/0"), "\0{\"t\":{\"0\":7,\"1\":3}}");
    assertEquals(Optional.of(OFFSETS), log().read());
  }

  @Test
  void aNewerVersionIsRefusedNamingTheFile() throws IOException {
    Files.createDirectories(dir.resolve("sources/0"));
    Files.writeString(dir.resolve("sources/0/0"), "\0v2\n{\"t\":{\"0\":7}}");
    IllegalStateException refused = assertThrows(IllegalStateException.class, () -> log().read());
    assertTrue(refused.getMessage().contains("sources/0/0"), refused.getMessage());
    assertTrue(refused.getMessage().contains("version v2"), refused.getMessage());
  }
}
