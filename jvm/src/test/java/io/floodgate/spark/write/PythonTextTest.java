package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** {@link PythonText}: values written as the Python sink writes them (its {@code repr}s). */
class PythonTextTest {
  @Test
  void floatsAreWrittenAsPythonsRepr() {
    String[][] cases = {
      {"1e+22", "1e22"},
      {"1e+100", "1e100"},
      {"0.001", "0.001"},
      {"-1.5e-10", "-1.5e-10"},
      {"123.456", "123.456"},
      {"1e-07", "1e-7"},
      {"1.1", "1.1"},
      {"100.0", "100"},
      {"2.2250738585072014e-308", "2.2250738585072014e-308"},
      {"4.35", "4.35"},
      {"9007199254740992.0", "9007199254740993"},
    };
    for (String[] c : cases) {
      assertEquals(c[0], PythonText.floatRepr(Double.parseDouble(c[1])), c[1]);
    }
  }

  @Test
  void textIsQuotedAsPythonQuotesIt() {
    assertEquals("\"it's\"", PythonText.strRepr("it's"));
    assertEquals("'a\\nb\\x00\\xa0é'", PythonText.strRepr("a\nb\u0000\u00a0é"));
    assertEquals("'\\'\"'", PythonText.strRepr("'\""));
    assertEquals("b'\\x80'", PythonText.bytesRepr(new byte[] {(byte) 0x80}));
    assertEquals(
        "datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)",
        PythonText.datetimeRepr(-1, true));
    assertEquals("datetime.datetime(1970, 1, 1, 0, 0)", PythonText.datetimeRepr(0, false));
  }
}
