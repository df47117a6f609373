package io.floodgate.spark.kafka;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;

/**
 * The metadata of the offset commits by which Floodgate's tasks mark what they did (the sink's
 * batch and input markers, the real-time source's ends log): JSON {@code {"query_id": <Spark's
 * query id>, "batch": <batch>}}, with {@code "tuples": <n>} for a sink's marker. The query id is
 * the one Spark keeps in the query's checkpoint, so a new checkpoint's query takes no marker of
 * another for its own.
 */
public final class CommitMetadata {
  private static final ObjectMapper JSON = new ObjectMapper();

  private CommitMetadata() {}

  /** The metadata naming batch {@code batch} of query {@code queryId}. */
  public static String of(String queryId, long batch) {
    return node(queryId, batch).toString();
  }

  /** The metadata naming batch {@code batch} of query {@code queryId}, {@code tuples} written. */
  public static String of(String queryId, long batch, long tuples) {
    ObjectNode node = node(queryId, batch);
    node.put("tuples", tuples);
    return node.toString();
  }

  /**
   * A commit's metadata when it names query {@code queryId}, else {@code null} (no commit, no or
   * other metadata, another query's).
   */
  public static JsonNode ofQuery(String queryId, OffsetAndMetadata committed) {
    if (committed == null || committed.metadata() == null || committed.metadata().isEmpty()) {
      return null;
    }
    try {
      JsonNode node = JSON.readTree(committed.metadata());
      return queryId.equals(node.path("query_id").asText(null)) ? node : null;
    } catch (IOException e) {
      return null;
    }
  }

  /** Whether a commit names batch {@code batch} of query {@code queryId}. */
  public static boolean names(OffsetAndMetadata committed, String queryId, long batch) {
    JsonNode node = ofQuery(queryId, committed);
    return node != null && node.path("batch").asLong(-1) == batch;
  }

  private static ObjectNode node(String queryId, long batch) {
    ObjectNode node = JSON.createObjectNode();
    node.put("query_id", queryId);
    node.put("batch", batch);
    return node;
  }
}
