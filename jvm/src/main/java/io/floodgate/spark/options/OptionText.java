package io.floodgate.spark.options;

import java.util.ArrayList;
import java.util.List;

/**
 * The words of the source's refusals: the refusal itself ({@link #refuse}: an {@link
 * IllegalArgumentException} whose message starts with {@code floodgate_kafka:}), and values quoted
 * in it as Python writes them ({@link #repr}, {@link #pyList}), so that a refusal reads the same as
 * the one {@code pipeline.spark.options} gives and as {@code tests/golden/options/cases.json}
 * writes it, byte for byte.
 */
public final class OptionText {
  private OptionText() {}

  /**
   * The source's refusal of an option map.
   *
   * @param what what is refused: the option, the value given and what is allowed
   * @return an {@link IllegalArgumentException} whose message is {@code floodgate_kafka: <what>}
   */
  public static IllegalArgumentException refuse(String what) {
    return new IllegalArgumentException(SourceOptions.SOURCE_NAME + ": " + what);
  }

  /**
   * {@code text} quoted for a refusal's message, as Python's {@code repr} writes a string (the
   * refusals of {@code tests/golden/options/cases.json} quote values so): in single quotes, or
   * double ones when it holds a single quote and no double one; backslash, the quote and what is
   * not {@link #printable} escaped.
   */
  public static String repr(String text) {
    char quote = text.indexOf('\'') >= 0 && text.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder out = new StringBuilder(text.length() + 2).append(quote);
    text.codePoints()
        .forEach(
            cp -> {
              if (cp == quote || cp == '\\') {
                out.append('\\').appendCodePoint(cp);
              } else if (cp == '\n') {
                out.append("\\n");
              } else if (cp == '\r') {
                out.append("\\r");
              } else if (cp == '\t') {
                out.append("\\t");
              } else if (printable(cp)) {
                out.appendCodePoint(cp);
              } else if (cp <= 0xff) {
                out.append(String.format("\\x%02x", cp));
              } else if (cp <= 0xffff) {
                out.append(String.format("\\u%04x", cp));
              } else {
                out.append(String.format("\\U%08x", cp));
              }
            });
    return out.append(quote).toString();
  }

  /**
   * Whether a code point is written as it is in a quoted value (Python's {@code str.isprintable}):
   * the space, and none of Unicode's control, format, surrogate, private-use, unassigned or
   * separator code points.
   */
  private static boolean printable(int cp) {
    if (cp == ' ') {
      return true;
    }
    switch (Character.getType(cp)) {
      case Character.CONTROL,
      Character.FORMAT,
      Character.SURROGATE,
      Character.PRIVATE_USE,
      Character.UNASSIGNED,
      Character.LINE_SEPARATOR,
      Character.PARAGRAPH_SEPARATOR,
      Character.SPACE_SEPARATOR:
        return false;
      default:
        return true;
    }
  }

  /** A list of names in refusals, each quoted as {@link #repr} does: {@code ['a', 'b']}. */
  static String pyList(List<String> names) {
    List<String> quoted = new ArrayList<>();
    names.forEach(n -> quoted.add(repr(n)));
    return "[" + String.join(", ", quoted) + "]";
  }

  /** {@code null} for an empty value, as an option given empty is one not given. */
  static String emptyAsNull(String value) {
    return value == null || value.isEmpty() ? null : value;
  }
}
