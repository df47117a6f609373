package io.floodgate.spark.write;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;

/**
 * Python's texts of values ({@code str}, {@code repr}), as the Python sink writes them: the texts
 * of record keys ({@code key_text}) and the values the encoder's refusals quote, so that a key and
 * a refusal read byte for byte as the Python sink's ({@code tests/golden/sink/encoded.json}).
 */
final class PythonText {
  private PythonText() {}

  /**
   * Python's {@code repr} (and {@code str}) of a float: the shortest decimal that reads back as
   * {@code d} (the nearest of them when several), positional when the decimal exponent is in {@code
   * -4 <= e < 16}, else {@code d.ddde+XX}; {@code nan}, {@code inf}, {@code -inf}; an integral
   * value ends {@code .0} (CPython's {@code float_repr}, {@code 'r'} format).
   */
  static String floatRepr(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0) {
      return Double.doubleToRawLongBits(d) < 0 ? "-0.0" : "0.0";
    }
    if (Math.abs(d) < 1e16 && d == Math.rint(d)) {
      return (long) d + ".0";
    }
    double a = Math.abs(d);
    BigDecimal exact = new BigDecimal(a);
    BigDecimal shortest = null;
    for (int p = 1; p <= 17 && shortest == null; p++) {
      BigDecimal near = exact.round(new MathContext(p, RoundingMode.HALF_EVEN));
      if (near.doubleValue() == a) {
        shortest = near;
      } else {
        RoundingMode away = near.compareTo(exact) > 0 ? RoundingMode.DOWN : RoundingMode.UP;
        BigDecimal other = exact.round(new MathContext(p, away));
        if (other.doubleValue() == a) {
          shortest = other;
        }
      }
    }
    BigDecimal s = shortest.stripTrailingZeros();
    String digits = s.unscaledValue().toString();
    int n = digits.length();
    int point = n - s.scale(); // d = 0.digits * 10^point
    StringBuilder out = new StringBuilder(24);
    if (d < 0) {
      out.append('-');
    }
    if (point <= -4 || point > 16) {
      out.append(digits.charAt(0));
      if (n > 1) {
        out.append('.').append(digits, 1, n);
      }
      int e = point - 1;
      out.append(e < 0 ? "e-" : "e+");
      if (Math.abs(e) < 10) {
        out.append('0');
      }
      out.append(Math.abs(e));
    } else if (point <= 0) {
      out.append("0.");
      out.append("0".repeat(-point));
      out.append(digits);
    } else if (point >= n) {
      out.append(digits).append("0".repeat(point - n)).append(".0");
    } else {
      out.append(digits, 0, point).append('.').append(digits, point, n);
    }
    return out.toString();
  }

  /** The digits of the integer a whole double is (Python's {@code int(d)}). */
  static String integerText(double whole) {
    return new BigDecimal(whole).toBigInteger().toString();
  }

  /** Python's {@code repr} of bytes: {@code b'...'}. */
  static String bytesRepr(byte[] bytes) {
    boolean single = false;
    boolean dbl = false;
    for (byte b : bytes) {
      single |= b == '\'';
      dbl |= b == '"';
    }
    char quote = single && !dbl ? '"' : '\'';
    StringBuilder out = new StringBuilder(bytes.length + 3).append('b').append(quote);
    for (byte b : bytes) {
      int c = b & 0xFF;
      if (c == quote || c == '\\') {
        out.append('\\').append((char) c);
      } else if (c == '\t') {
        out.append("\\t");
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c < 0x20 || c >= 0x7F) {
        out.append(String.format("\\x%02x", c));
      } else {
        out.append((char) c);
      }
    }
    return out.append(quote).toString();
  }

  /** Python's {@code repr} of a str (non-printable characters escaped as Python does). */
  static String strRepr(String text) {
    boolean single = text.indexOf('\'') >= 0;
    boolean dbl = text.indexOf('"') >= 0;
    char quote = single && !dbl ? '"' : '\'';
    StringBuilder out = new StringBuilder(text.length() + 2).append(quote);
    text.codePoints()
        .forEach(
            c -> {
              if (c == quote || c == '\\') {
                out.append('\\').appendCodePoint(c);
              } else if (c == '\t') {
                out.append("\\t");
              } else if (c == '\n') {
                out.append("\\n");
              } else if (c == '\r') {
                out.append("\\r");
              } else if (c < 0x20 || c == 0x7F) {
                out.append(String.format("\\x%02x", c));
              } else if (c > 0x7F && !printable(c)) {
                out.append(
                    c <= 0xFF
                        ? String.format("\\x%02x", c)
                        : c <= 0xFFFF ? String.format("\\u%04x", c) : String.format("\\U%08x", c));
              } else {
                out.appendCodePoint(c);
              }
            });
    return out.append(quote).toString();
  }

  private static boolean printable(int c) {
    switch (Character.getType(c)) {
      case Character.CONTROL:
      case Character.FORMAT:
      case Character.PRIVATE_USE:
      case Character.SURROGATE:
      case Character.UNASSIGNED:
      case Character.LINE_SEPARATOR:
      case Character.PARAGRAPH_SEPARATOR:
      case Character.SPACE_SEPARATOR:
        return false;
      default:
        return true;
    }
  }

  /** {@code repr} of a {@code datetime} from epoch microseconds (the time zone as UTC). */
  static String datetimeRepr(long micros, boolean zoned) {
    LocalDateTime t =
        LocalDateTime.ofEpochSecond(
            Math.floorDiv(micros, 1_000_000L),
            (int) Math.floorMod(micros, 1_000_000L) * 1000,
            ZoneOffset.UTC);
    List<Integer> parts = new ArrayList<>();
    parts.addAll(
        List.of(t.getYear(), t.getMonthValue(), t.getDayOfMonth(), t.getHour(), t.getMinute()));
    int micro = t.getNano() / 1000;
    if (t.getSecond() != 0 || micro != 0) {
      parts.add(t.getSecond());
    }
    if (micro != 0) {
      parts.add(micro);
    }
    StringBuilder out = new StringBuilder("datetime.datetime(");
    for (int i = 0; i < parts.size(); i++) {
      out.append(i > 0 ? ", " : "").append(parts.get(i));
    }
    return out.append(zoned ? ", tzinfo=UTC)" : ")").toString();
  }

  /** Python's {@code _short}: a {@code repr} cut to 80 characters. */
  static String shortened(String repr) {
    int count = repr.codePointCount(0, repr.length());
    if (count <= 80) {
      return repr;
    }
    return repr.substring(0, repr.offsetByCodePoints(0, 77)) + "...";
  }
}
