package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class FreeSpaceShareTest {
  @Test
  void sharesAddUpToTheFreeSpaceAndDifferByAtMostOne() {
    Random random = new Random(7);
    for (int trial = 0; trial < 10_000; trial++) {
      long free = random.nextInt(10_000);
      int tasks = 1 + random.nextInt(300);
      long sum = 0;
      long least = Long.MAX_VALUE;
      long most = 0;
      for (int p = 0; p < tasks; p++) {
        long share = FreeSpaceShare.of(free, tasks, p);
        sum += share;
        least = Math.min(least, share);
        most = Math.max(most, share);
      }
      assertEquals(free, sum, "free " + free + ", tasks " + tasks);
      assertTrue(most - least <= 1);
    }
  }

  @Test
  void aRereadAddsBackTheTasksOwnOpenRecords() {
    // Max 100, length read 90 of which 30 are this task's open records: 40 free, 4 tasks.
    assertEquals(10, FreeSpaceShare.reread(100, 90, 30, 4, 0));
    assertEquals(0, FreeSpaceShare.reread(100, 150, 10, 2, 1));
  }

  @Test
  void aTaskTakesItsTuplesAndAMarkerPerPartitionWritten() {
    assertEquals(0, FreeSpaceShare.required(0, 0));
    assertEquals(53, FreeSpaceShare.required(50, 3));
  }

  @Test
  void refusesArgumentsOutOfRange() {
    assertThrows(IllegalArgumentException.class, () -> FreeSpaceShare.of(-1, 2, 0));
    assertThrows(IllegalArgumentException.class, () -> FreeSpaceShare.of(10, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> FreeSpaceShare.of(10, 2, 2));
  }

  /**
   * The property the sink relies on: whatever the tasks write, in whatever order their commits and
   * rereads come, and however the readers consume meanwhile, the queue never holds more than its
   * max. Each trial is one micro-batch: a queue of random max and length, tasks with random outputs
   * over random output partitions, and a random interleaving of task steps (write, reread, commit,
   * give up) and readers' consumption.
   */
  @Test
  void concurrentWriterTasksNeverOverfillTheQueue() {
    Random random = new Random(42);
    for (int trial = 0; trial < 20_000; trial++) {
      Batch batch = new Batch(random);
      batch.run(random);
      assertTrue(
          batch.maxSeen <= batch.max,
          "trial " + trial + ": the queue held " + batch.maxSeen + " of max " + batch.max);
    }
  }

  /**
   * A real-time batch's tasks write one tuple at a time for as long as the batch lasts, each within
   * its share of the free space at the start plus its share of what the readers consumed by its
   * last read ({@link KafkaDataWriter}'s {@code admitNext}): however reads, writes and consumption
   * interleave, the queue never holds more than its max.
   */
  @Test
  void realTimeTasksNeverOverfillTheQueueWhateverTheReadersConsume() {
    Random random = new Random(7);
    for (int trial = 0; trial < 5_000; trial++) {
      long max = 1 + random.nextInt(500);
      long length = random.nextInt((int) max + 1);
      long consumed = 0;
      int n = 1 + random.nextInt(8);
      long free = max - length;
      long[] share = new long[n];
      long[] allowed = new long[n];
      long[] written = new long[n];
      for (int p = 0; p < n; p++) {
        share[p] = FreeSpaceShare.of(free, n, p);
        allowed[p] = share[p];
      }
      for (int step = 0; step < 2_000; step++) {
        if (random.nextInt(3) == 0) {
          long read = random.nextInt((int) length + 1); // readers consume
          length -= read;
          consumed += read;
          continue;
        }
        int p = random.nextInt(n);
        if (written[p] + 1 <= allowed[p]) {
          written[p]++;
          length++;
          assertTrue(length <= max, "trial " + trial + ": " + length + " of max " + max);
        } else {
          allowed[p] = share[p] + FreeSpaceShare.of(consumed, n, p);
        }
      }
    }
  }

  private static final class Task {
    final int partition;
    final long tuples;
    final int partitionsWritten;
    long allowed;
    int sleeps;
    boolean written; // records sent in the open transaction
    boolean done;

    Task(int partition, long tuples, int partitionsWritten, long allowed) {
      this.partition = partition;
      this.tuples = tuples;
      this.partitionsWritten = partitionsWritten;
      this.allowed = allowed;
    }

    long required() {
      return FreeSpaceShare.required(tuples, partitionsWritten);
    }
  }

  private static final class Batch {
    final long max;
    final int retries;
    long committed; // offsets committed and not yet read: the queue's length
    long open; // offsets of open transactions (counted by a read up to the high watermark)
    long maxSeen;
    final List<Task> tasks = new ArrayList<>();

    Batch(Random random) {
      max = 1 + random.nextInt(1_000);
      committed = random.nextInt((int) max + 1);
      maxSeen = committed;
      retries = random.nextInt(4);
      int n = 1 + random.nextInt(12);
      long free = max - committed;
      for (int p = 0; p < n; p++) {
        long tuples = random.nextInt(4) == 0 ? 0 : random.nextInt((int) max / 2 + 2);
        int partitions = tuples == 0 ? 0 : 1 + random.nextInt((int) Math.min(tuples, 6));
        tasks.add(new Task(p, tuples, partitions, FreeSpaceShare.of(free, n, p)));
      }
    }

    void run(Random random) {
      while (tasks.stream().anyMatch(t -> !t.done)) {
        if (random.nextInt(4) == 0) {
          committed -= random.nextInt((int) committed + 1); // readers consume
          continue;
        }
        List<Task> live = tasks.stream().filter(t -> !t.done).toList();
        Task task = live.get(random.nextInt(live.size()));
        step(task);
      }
    }

    void step(Task task) {
      if (!task.written) {
        task.written = true;
        open += task.tuples;
        return;
      }
      if (task.required() <= task.allowed) {
        open -= task.tuples;
        committed += task.required();
        maxSeen = Math.max(maxSeen, committed);
        task.done = true;
      } else if (task.sleeps >= retries) {
        open -= task.tuples; // gives up: its transaction aborts
        task.done = true;
      } else {
        task.sleeps++;
        long length = committed + open; // what a read up to the high watermark finds
        task.allowed =
            Math.max(
                task.allowed,
                FreeSpaceShare.reread(max, length, task.tuples, tasks.size(), task.partition));
      }
    }
  }
}
