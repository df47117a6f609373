package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.Golden;
import io.floodgate.spark.write.SinkOptions;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The names an executor derives against {@code tests/golden/contract/names.json}, the examples
 * {@code pipeline/names.py} is held to as well ({@code tests/unit/pipeline/test_names.py}).
 */
class NamesContractTest {
  private static final JsonNode SINK = Golden.read("contract/names.json").get("sink");

  @Test
  void aWriteTaskIsNamedAsTheDriverNamesIt() {
    String prefix = SINK.get("transactional_id_prefix").asText();
    for (JsonNode task : SINK.get("tasks")) {
      assertEquals(
          task.get("transactional_id").asText(),
          Names.taskTransactionalId(prefix, task.get("task").asInt()));
    }
  }

  @Test
  void theInputMarkersGroupIsNamedAsTheDriverNamesIt() {
    assertEquals(
        SINK.get("input_marker_group_id").asText(),
        Names.inputMarkerGroupId(SINK.get("transactional_id_prefix").asText()));
  }

  @Test
  void aSinksOptionsNameItsTasksByTheContract() {
    JsonNode task = SINK.get("tasks").get(1);
    SinkOptions options =
        SinkOptions.parse(
            Map.of(
                "kafka.bootstrap.servers", "b:1",
                "topic", "out",
                "schema", "flight",
                "schemas", "{}",
                "transactionalIdPrefix", SINK.get("transactional_id_prefix").asText()));
    assertEquals(
        task.get("transactional_id").asText(), options.transactionalId(task.get("task").asInt()));
  }
}
