package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import io.floodgate.spark.serde.SchemaRepository;
import io.floodgate.spark.serde.TupleDecoder;
import java.io.IOException;
import java.util.List;
import java.util.Optional;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/** {@link RecordEventTime}: the Kafka timestamp, or the decoded {@code timestampField}. */
class RecordEventTimeTest {
  private static final String SCHEMA =
      "{\"type\": \"record\", \"name\": \"flight\", \"fields\": ["
          + "{\"name\": \"carrier\", \"type\": \"string\"},"
          + "{\"name\": \"time_hour\", \"type\": {\"type\": \"long\","
          + " \"logicalType\": \"timestamp-millis\"}},"
          + "{\"name\": \"minute\", \"type\": [\"null\", \"int\"]},"
          + "{\"name\": \"price\", \"type\": \"double\"}]}";

  private final Schema schema = new Schema.Parser().parse(SCHEMA);
  private final SchemaRepository repository = new SchemaRepository("{\"flight\": " + SCHEMA + "}");

  private byte[] encode(long timeHour, Integer minute) throws IOException {
    GenericRecord record = new GenericData.Record(schema);
    record.put("carrier", "UA");
    record.put("time_hour", timeHour);
    record.put("minute", minute);
    record.put("price", 1.5);
    return new BinaryMessageEncoder<GenericRecord>(GenericData.get(), schema)
        .encode(record)
        .array();
  }

  private static ConsumerRecord<byte[], byte[]> record(byte[] value, long timestamp) {
    return new ConsumerRecord<>(
        "t",
        0,
        0L,
        timestamp,
        TimestampType.CREATE_TIME,
        -1,
        value == null ? -1 : value.length,
        null,
        value,
        new RecordHeaders(),
        Optional.empty());
  }

  private RecordEventTime field(String name) {
    return RecordEventTime.field(
        new TupleDecoder("flights", schema, repository, List.of(name), new int[] {0}),
        schema,
        name);
  }

  @Test
  void aTimestampMillisFieldIsItsEpochMillis() throws IOException {
    RecordEventTime field = field("time_hour");
    assertEquals(1_356_998_400_000L, field.of(record(encode(1_356_998_400_000L, 5), 7L)));
  }

  @Test
  void aNullableIntFieldIsReadAsMillisAndNullAsUnknown() throws IOException {
    RecordEventTime field = field("minute");
    assertEquals(42L, field.of(record(encode(0L, 42), 7L)));
    assertNull(field.of(record(encode(0L, null), 7L)));
  }

  @Test
  void aTupleThatDoesNotDecodeOrAFieldThatIsNoWholeNumberHasNoEventTime() throws IOException {
    RecordEventTime field = field("time_hour");
    assertNull(field.of(record(new byte[] {1, 2, 3}, 7L)));
    assertNull(field("price").of(record(encode(0L, 1), 7L)));
  }

  @Test
  void theKafkaTimestampIsTheRecordsOrNone() {
    assertEquals(7L, RecordEventTime.kafkaTimestamp().of(record(new byte[0], 7L)));
    assertNull(RecordEventTime.kafkaTimestamp().of(record(new byte[0], -1L)));
  }
}
