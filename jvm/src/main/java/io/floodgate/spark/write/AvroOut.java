package io.floodgate.spark.write;

import java.util.Arrays;
import org.apache.avro.io.BinaryData;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A reused output buffer, written with Avro's binary encoding: {@link BinaryData}'s encoders, those
 * Avro's own buffered {@code BinaryEncoder} writes its buffer with, here with no stream behind the
 * buffer (nothing to flush, one copy out per record).
 */
final class AvroOut {
  byte[] buf = new byte[256];
  int pos;

  private void ensure(int n) {
    if (pos + n > buf.length) {
      buf = Arrays.copyOf(buf, Math.max(buf.length * 2, pos + n));
    }
  }

  byte[] toByteArray() {
    return Arrays.copyOf(buf, pos);
  }

  void writeByte(int b) {
    ensure(1);
    buf[pos++] = (byte) b;
  }

  void writeRaw(byte[] bytes) {
    ensure(bytes.length);
    System.arraycopy(bytes, 0, buf, pos, bytes.length);
    pos += bytes.length;
  }

  void writeRaw(UTF8String text) {
    int n = text.numBytes();
    ensure(n);
    text.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + pos);
    pos += n;
  }

  void writeAscii(String text) {
    int n = text.length();
    ensure(n);
    for (int i = 0; i < n; i++) {
      buf[pos++] = (byte) text.charAt(i);
    }
  }

  /** A long's decimal digits, as Python's {@code str} of an int. */
  void writeDigits(long v) {
    if (v == Long.MIN_VALUE) {
      writeAscii("-9223372036854775808");
      return;
    }
    ensure(20);
    if (v < 0) {
      buf[pos++] = '-';
      v = -v;
    }
    int end = pos + digitCount(v);
    int i = end;
    do {
      buf[--i] = (byte) ('0' + v % 10);
      v /= 10;
    } while (v != 0);
    pos = end;
  }

  private static int digitCount(long v) {
    int n = 1;
    for (long p = 10; n < 19 && v >= p; p *= 10) {
      n++;
    }
    return n;
  }

  void writeInt(int v) {
    ensure(5);
    pos += BinaryData.encodeInt(v, buf, pos);
  }

  void writeLong(long v) {
    ensure(10);
    pos += BinaryData.encodeLong(v, buf, pos);
  }

  void writeFloat(float v) {
    ensure(4);
    pos += BinaryData.encodeFloat(v, buf, pos);
  }

  void writeDouble(double v) {
    ensure(8);
    pos += BinaryData.encodeDouble(v, buf, pos);
  }

  void writeBoolean(boolean v) {
    ensure(1);
    pos += BinaryData.encodeBoolean(v, buf, pos);
  }

  /** Avro {@code string}: the length, then the UTF-8 bytes as Spark holds them. */
  void writeString(UTF8String text) {
    writeInt(text.numBytes());
    writeRaw(text);
  }

  /** Avro {@code bytes}: the length, then the bytes. */
  void writeBytes(byte[] bytes) {
    writeInt(bytes.length);
    writeRaw(bytes);
  }
}
