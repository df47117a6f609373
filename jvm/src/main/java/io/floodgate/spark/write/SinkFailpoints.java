package io.floodgate.spark.write;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink's failpoints, for crash tests: named steps where the process dies, stops, waits or fails
 * a task, armed from outside by one environment variable, as Floodgate's Python failpoints are
 * ({@code pipeline.failpoints}).
 *
 * <p>{@code FLOODGATE_FAILPOINT=<name>:<batch>[:<action>]} arms failpoint {@code name} for
 * micro-batch {@code batch}. The sink's failpoints:
 *
 * <ul>
 *   <li>{@code mid-transaction}: a task's records are handed to its producer in its open
 *       transaction, before it waits for their acknowledgement;
 *   <li>{@code records-sent}: a task's records are acknowledged in its open transaction, before its
 *       batch marker is sent;
 *   <li>{@code before-commit}: right before a task's {@code commitTransaction};
 *   <li>{@code after-commit}: right after a task's transaction committed, before the task reports
 *       to the driver (the first task of the batch that gets there);
 *   <li>{@code driver-commit}: on the driver, once every task committed, before the input offsets
 *       are committed and Spark writes its commit log.
 * </ul>
 *
 * <p>Actions: none kills the process group with SIGKILL ({@code kill -9} of the driver, whose
 * executors share its process in local mode); {@code stop} stops it with SIGSTOP, once per process;
 * {@code wait=<path>} creates {@code <path>.reached} and waits until {@code <path>} exists (at most
 * {@link #WAIT_MS}); {@code fail} throws once per process, in the first task attempt 0 that gets
 * there, which Spark then retries, or whose query fails and is replayed (an executor lost after the
 * step). Unset in production, where a failpoint is one string compare.
 */
public final class SinkFailpoints {
  private static final Logger LOG = LoggerFactory.getLogger(SinkFailpoints.class);

  /** The environment variable that arms a failpoint. */
  public static final String ENV = "FLOODGATE_FAILPOINT";

  /** How long a {@code wait=} failpoint waits for its release file, ms. */
  public static final long WAIT_MS = 600_000;

  private static final Set<String> STOPPED = ConcurrentHashMap.newKeySet();
  private static final Set<String> REACHED = ConcurrentHashMap.newKeySet();

  /** A spec armed in this JVM, over the environment's ({@link #arm}). */
  private static volatile String armedHere;

  private SinkFailpoints() {}

  /**
   * Arm {@code spec} in this JVM, in place of {@link #ENV}'s, for a test whose driver is already
   * running (in local mode its executors are this JVM); {@code null} disarms it.
   */
  public static void arm(String spec) {
    armedHere = spec;
    REACHED.clear();
  }

  /**
   * What failpoint {@code name} is armed to do for {@code batch}: {@code null} when it is not,
   * {@code ""} for the default (a kill), else the action.
   */
  static String armed(String spec, String name, long batch) {
    String point = name + ":" + batch;
    if (spec == null || !spec.startsWith(point)) {
      return null;
    }
    if (spec.length() == point.length()) {
      return "";
    }
    return spec.charAt(point.length()) == ':' ? spec.substring(point.length() + 1) : null;
  }

  /**
   * Reach failpoint {@code name} in micro-batch {@code batch}: do what it is armed to do.
   *
   * @param attempt the task's attempt number (a {@code fail} fails an attempt 0 only)
   * @throws IllegalStateException armed with {@code fail}, the first time an attempt 0 gets here
   */
  public static void reach(String name, long batch, int attempt) {
    String spec = armedHere != null ? armedHere : System.getenv(ENV);
    String action = armed(spec, name, batch);
    if (action == null) {
      return;
    }
    String where = name + ":" + batch;
    if (action.isEmpty()) {
      if (REACHED.add(where)) {
        LOG.error("failpoint {} reached: killing the driver's process group", where);
        signalGroup("KILL");
      }
      // Every task that gets here stands still until the kill lands: none goes past it.
      waitForever();
    } else if (action.equals("stop")) {
      if (STOPPED.add(where)) {
        LOG.error("failpoint {} reached: stopping the driver's process group (SIGSTOP)", where);
        signalGroup("STOP");
      }
    } else if (action.equals("fail")) {
      if (attempt == 0 && REACHED.add(where)) {
        LOG.error("failpoint {} reached: failing the task's first attempt", where);
        throw new IllegalStateException("failpoint " + where + ": the task's first attempt fails");
      }
    } else if (action.startsWith("wait=")) {
      waitForRelease(where, Path.of(action.substring("wait=".length())));
    }
  }

  private static void waitForever() {
    try {
      Thread.sleep(WAIT_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void waitForRelease(String where, Path release) {
    LOG.error("failpoint {} reached: waiting for {}", where, release);
    try {
      Path reached = Path.of(release + ".reached");
      if (!Files.exists(reached)) {
        Files.createFile(reached);
      }
      long deadline = System.currentTimeMillis() + WAIT_MS;
      while (!Files.exists(release) && System.currentTimeMillis() < deadline) {
        Thread.sleep(100);
      }
    } catch (IOException e) {
      LOG.error("failpoint {}: cannot create {}.reached", where, release, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** Send {@code signal} to this process's group (Java has no killpg: the {@code kill} command). */
  private static void signalGroup(String signal) {
    try {
      String stat = Files.readString(Path.of("/proc/self/stat"));
      String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      String group = fields[2]; // state, ppid, pgrp
      new ProcessBuilder("kill", "-" + signal, "--", "-" + group).inheritIO().start().waitFor();
    } catch (IOException e) {
      LOG.error("failpoint: cannot signal the process group", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
