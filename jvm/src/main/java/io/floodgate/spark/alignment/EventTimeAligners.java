package io.floodgate.spark.alignment;

import io.floodgate.spark.SourceOptions;

/** The event-time aligner of a source's options. */
public final class EventTimeAligners {
  private EventTimeAligners() {}

  /** The aligner of option {@code maxEventTimeDriftMs} (set). */
  public static EventTimeAligner of(SourceOptions options) {
    return EventTimeAligner.NONE;
  }
}
