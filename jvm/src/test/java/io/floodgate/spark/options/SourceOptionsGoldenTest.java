package io.floodgate.spark.options;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.floodgate.spark.Golden;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * {@link SourceOptions#parse} against {@code tests/golden/options/cases.json}, the specification
 * edited by hand in review (tests/golden/README.md) of what the source makes of each option map:
 * the fields, by the camel case of their names in {@code pipeline.spark.options.SourceOptions}, or
 * a refusal whose message contains the given text.
 */
class SourceOptionsGoldenTest {
  private static final JsonNode CASES = Golden.read("options/cases.json");

  @TestFactory
  Stream<DynamicTest> everyCaseParsesAsSpecified() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : CASES) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> check(c)));
    }
    return tests.stream();
  }

  private static void check(JsonNode c) throws ReflectiveOperationException {
    Map<String, String> options = new LinkedHashMap<>();
    c.get("options").fields().forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
    if (c.has("error")) {
      IllegalArgumentException refused =
          assertThrows(
              IllegalArgumentException.class,
              () -> SourceOptions.parse(options),
              c.get("name").asText());
      String expected = c.get("error").asText();
      assertTrue(
          refused.getMessage().contains(expected),
          () -> "message:\n  " + refused.getMessage() + "\nshould contain:\n  " + expected);
      return;
    }
    SourceOptions parsed = SourceOptions.parse(options);
    Iterator<Map.Entry<String, JsonNode>> fields = c.get("parsed").fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      if (field.getKey().equals("group_id_prefix")) {
        String prefix = field.getValue().asText();
        assertTrue(parsed.groupId.startsWith(prefix), parsed.groupId);
        assertEquals(prefix.length() + 36, parsed.groupId.length(), parsed.groupId);
        continue;
      }
      Field javaField = SourceOptions.class.getField(camelCase(field.getKey()));
      JsonNode actual = asJson(javaField.get(parsed));
      assertTrue(
          field.getValue().equals(Golden.NUMERIC, actual),
          () -> field.getKey() + ": expected " + field.getValue() + ", got " + actual);
    }
  }

  /** {@code max_rows_per_trigger} -> {@code maxRowsPerTrigger}. */
  static String camelCase(String snake) {
    StringBuilder out = new StringBuilder();
    boolean upper = false;
    for (char ch : snake.toCharArray()) {
      if (ch == '_') {
        upper = true;
      } else {
        out.append(upper ? Character.toUpperCase(ch) : ch);
        upper = false;
      }
    }
    return out.toString();
  }

  /** A field's value as the golden file writes it. */
  private static JsonNode asJson(Object value) {
    if (value instanceof EventTimeWindow w) {
      return Golden.JSON.valueToTree(List.of(w.durationMs(), w.slideMs(), w.startMs()));
    }
    return value == null ? JsonNodeFactory.instance.nullNode() : Golden.JSON.valueToTree(value);
  }

  @Test
  void everyPublicFieldIsInTheGoldenCases() {
    ObjectNode first = null;
    for (JsonNode c : CASES) {
      if (c.has("parsed")) {
        first = (ObjectNode) c.get("parsed");
        break;
      }
    }
    assertFalse(first == null);
    for (Field f : SourceOptions.class.getFields()) {
      if (java.lang.reflect.Modifier.isStatic(f.getModifiers())) {
        continue;
      }
      boolean named = false;
      Iterator<String> names = first.fieldNames();
      while (names.hasNext()) {
        String name = names.next();
        named |= camelCase(name).equals(f.getName()) || name.equals("group_id_prefix");
      }
      assertTrue(named, f.getName());
    }
  }

  @Test
  void camelCaseOfPythonNames() {
    assertEquals("maxRowsPerTrigger", camelCase("max_rows_per_trigger"));
    assertEquals("topic", camelCase("topic"));
  }
}
