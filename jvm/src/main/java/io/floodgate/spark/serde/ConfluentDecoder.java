package io.floodgate.spark.serde;

import java.util.HexFormat;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;

/**
 * Decodes a stream's tuples in the Confluent wire format (magic byte {@code 0}, the writer schema's
 * Schema Registry id as 4 bytes big-endian, the Avro binary body) into the columns of a Spark row
 * (docs/how-to/confluent-wire-format.md). Floodgate's Python codec of the format, {@code
 * pipeline.serde.confluent.ConfluentCodec}, reads the same framing with the same refusal reasons.
 *
 * <p>The writer schema is fetched by id from the registry ({@link SchemaRegistryClient}, subject
 * {@code <topic>-value}, Confluent's {@code TopicNameStrategy}) and resolved to the stream's schema
 * by Avro's rules, so a tuple written with an older schema reads as the stream's. Refusals, with
 * the dead-letter reasons of docs/reference/codes.md ("Dead letters"): {@code bad-magic-byte}
 * (shorter than the 5-byte framing, or a first byte other than 0), {@code unknown-schema-id} (the
 * registry answers 404), {@code bad-body} (the body does not decode with the writer schema, or that
 * schema is not Avro or does not resolve to the stream's). A registry that cannot be asked is no
 * refusal: {@link SchemaRegistryException} fails the task, which Spark retries, and no tuple is
 * dead-lettered for an outage.
 *
 * <p>A stream's keys in the same format ({@code keyEncoding = confluent}) are decoded by one made
 * with {@link #forKey}: subject {@code <topic>-key}, the key record of {@link KeySchema} as the
 * reader schema.
 *
 * <p>Not thread-safe: one per task (the registry client it asks is shared).
 */
public final class ConfluentDecoder extends TupleDecoder {
  /** The first byte of Confluent's framing (confluent-kafka's {@code _MAGIC_BYTE_V0}). */
  public static final byte MAGIC_BYTE = 0;

  /** Bytes before the body: magic byte and schema id. */
  public static final int FRAMING_SIZE = 5;

  private final SchemaRegistryClient registry;
  private final String subject;

  /**
   * @param stream the stream's name (for errors)
   * @param topic the stream's topic; its subject is {@code <topic>-value}
   * @param schema the stream's schema (the reader schema)
   * @param registry the Schema Registry the ids are looked up in
   * @param fields the stream's fields to decode
   * @param ordinals the row ordinal of each field ({@code ordinals[i]} of {@code fields.get(i)})
   */
  public ConfluentDecoder(
      String stream,
      String topic,
      Schema schema,
      SchemaRegistryClient registry,
      List<String> fields,
      int[] ordinals) {
    this(stream, schema, topic + "-value", registry, fields, ordinals);
  }

  private ConfluentDecoder(
      String stream,
      Schema schema,
      String subject,
      SchemaRegistryClient registry,
      List<String> fields,
      int[] ordinals) {
    super(stream, schema, fields, ordinals);
    this.registry = registry;
    this.subject = subject;
  }

  /**
   * A decoder of a stream's Confluent-encoded keys ({@code keyEncoding = confluent}): the subject
   * is {@code <topic>-key}, and every field of {@code keySchema} is decoded into a row of its own
   * (field {@code i} at ordinal {@code i}), the {@code key} column's struct.
   *
   * @param stream the stream's name (for errors)
   * @param topic the stream's topic
   * @param keySchema the key record's schema ({@link KeySchema}), the reader schema
   * @param registry the Schema Registry the ids are looked up in
   */
  public static ConfluentDecoder forKey(
      String stream, String topic, Schema keySchema, SchemaRegistryClient registry) {
    List<String> fields = keySchema.getFields().stream().map(Schema.Field::name).toList();
    int[] ordinals = new int[fields.size()];
    for (int i = 0; i < ordinals.length; i++) {
      ordinals[i] = i;
    }
    return new ConfluentDecoder(stream, keySchema, topic + "-key", registry, fields, ordinals);
  }

  /**
   * The schema id of a tuple's framing, unsigned.
   *
   * @throws TupleRejected {@code bad-magic-byte}: {@code data} is null, shorter than {@value
   *     #FRAMING_SIZE} bytes, or does not start with {@link #MAGIC_BYTE}
   */
  @Override
  protected long writerKey(byte[] data) throws TupleRejected {
    if (data == null || data.length < FRAMING_SIZE || data[0] != MAGIC_BYTE) {
      String start =
          data == null || data.length == 0
              ? "empty"
              : HexFormat.of().formatHex(data, 0, Math.min(FRAMING_SIZE, data.length));
      throw new TupleRejected(
          "bad-magic-byte",
          "not the Confluent wire format (starts "
              + start
              + ", expected magic byte 00 and a 4-byte schema id)");
    }
    return ((data[1] & 0xFFL) << 24)
        | ((data[2] & 0xFF) << 16)
        | ((data[3] & 0xFF) << 8)
        | (data[4] & 0xFF);
  }

  @Override
  protected int headerSize() {
    return FRAMING_SIZE;
  }

  /**
   * The registry's schema of {@code id}.
   *
   * @throws TupleRejected {@code unknown-schema-id} (the registry has none of that id) or {@code
   *     bad-body} (it is not an Avro schema that parses)
   * @throws SchemaRegistryException the registry could not be asked
   */
  @Override
  protected Schema writerSchema(long id) throws TupleRejected {
    try {
      return registry.schemaById(id, subject);
    } catch (SchemaRegistryClient.SchemaNotFound e) {
      throw new TupleRejected(
          "unknown-schema-id",
          "the Schema Registry at "
              + registry.url()
              + " knows no schema of the id this tuple names: "
              + id
              + " ("
              + e.getMessage()
              + ")",
          e);
    } catch (SchemaParseException e) {
      throw new TupleRejected(
          "bad-body", writerName(id) + " is not an Avro schema that parses: " + e.getMessage(), e);
    }
  }

  @Override
  protected String writerName(long id) {
    return "schema id " + id + " of the Schema Registry at " + registry.url();
  }
}
