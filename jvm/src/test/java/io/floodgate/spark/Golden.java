package io.floodgate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;

/**
 * The golden files of {@code tests/golden/} of the repository: the source's specification, edited
 * by hand in review (tests/golden/README.md).
 */
public final class Golden {
  /** Reads the golden JSON files: integers stay whole, whatever their size. */
  public static final ObjectMapper JSON = new ObjectMapper();

  /** JSON numbers equal by value ({@code 5} the same as {@code 5L}); other nodes as usual. */
  public static final Comparator<JsonNode> NUMERIC =
      (a, b) -> {
        if (a.isNumber() && b.isNumber()) {
          return a.decimalValue().compareTo(b.decimalValue());
        }
        return a.equals(b) ? 0 : 1;
      };

  private Golden() {}

  /** {@code tests/golden/<name>} (Maven runs the tests in {@code jvm/}). */
  public static Path path(String name) {
    Path base = Path.of(System.getProperty("basedir", System.getProperty("user.dir")));
    return base.resolve("..").resolve("tests").resolve("golden").resolve(name).normalize();
  }

  /** The golden file {@code name}, parsed. */
  public static JsonNode read(String name) {
    try {
      return JSON.readTree(Files.readString(path(name)));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
