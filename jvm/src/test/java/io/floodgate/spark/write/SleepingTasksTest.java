package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class SleepingTasksTest {

  @Test
  void aTaskAsleepIsShownUntilItWakes() {
    SleepingTasks.enter("asleep", "copy", "flights_copy");
    assertEquals("copy\tflights_copy", SleepingTasks.of("asleep"));
    assertEquals("copy\tflights_copy", SleepingTasks.of("asleep"));
    SleepingTasks.exit("asleep", "copy", "flights_copy");
    assertEquals("", SleepingTasks.of("asleep"));
  }

  @Test
  void aSleepThatEndedBeforeTheReadIsShownToThatReadOnly() {
    SleepingTasks.enter("short", "copy", "flights_copy");
    SleepingTasks.exit("short", "copy", "flights_copy");
    assertEquals("copy\tflights_copy", SleepingTasks.of("short"));
    assertEquals("", SleepingTasks.of("short"));
  }

  @Test
  void eachQueryGroupSeesItsOwnTasksOnly() {
    SleepingTasks.enter("first", "copy", "flights_copy");
    SleepingTasks.enter("second", "delays", "delays_out");
    SleepingTasks.enter("second", "copy", "flights_copy");
    SleepingTasks.exit("second", "copy", "flights_copy");
    assertEquals("copy\tflights_copy\ndelays\tdelays_out", SleepingTasks.of("second"));
    assertEquals("copy\tflights_copy", SleepingTasks.of("first"));
    SleepingTasks.exit("first", "copy", "flights_copy");
    SleepingTasks.exit("second", "delays", "delays_out");
    assertEquals("", SleepingTasks.of("first"));
    assertEquals("", SleepingTasks.of("second"));
  }
}
