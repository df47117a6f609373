package io.floodgate.spark.swept;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayDeque;
import java.util.Deque;

/**
 * Which file a BLOB row may name (as the Python reader of swept BLOBs checks it, {@code
 * pipeline.swept.registered.check_blob_path} and {@code inside}): one inside the catalog's BLOB
 * directory once both are resolved (symbolic links, {@code ..}), and not the directory itself.
 * Nothing is opened.
 */
public final class BlobPaths {
  /** Symbolic links followed in one path before it is taken as it is (Linux's MAXSYMLINKS). */
  private static final int MAX_LINKS = 40;

  private BlobPaths() {}

  /**
   * Refuses a row whose file is not inside the BLOB directory the catalog recorded; with none
   * recorded, nothing is checked here (readers still open only a regular file, never through a
   * link). An object URL ({@link ObjectBlobs#isObjectUrl}, as path or directory) is checked as text
   * ({@link ObjectBlobs#inside}); a local path once links are resolved ({@link #inside}).
   *
   * @throws BlobPathException {@code reason} {@code outside}, naming the BLOB id, its path, where
   *     it resolves to (an object URL: itself) and the directory, the message of {@code
   *     pipeline.swept.registered.check_blob_path}
   */
  public static void check(BlobRow blob) {
    String directory = blob.blobDir();
    if (directory == null) {
      return;
    }
    boolean object = ObjectBlobs.isObjectUrl(blob.path()) || ObjectBlobs.isObjectUrl(directory);
    if (object ? !ObjectBlobs.inside(blob.path(), directory) : !inside(blob.path(), directory)) {
      String resolved =
          ObjectBlobs.isObjectUrl(blob.path()) ? blob.path() : realPath(blob.path()).toString();
      throw new BlobPathException(
          "its file resolves to "
              + resolved
              + ", outside the BLOB directory "
              + directory
              + ": not the sweeper's, neither read nor deleted",
          blob,
          directory,
          "outside");
    }
  }

  /** Whether {@code path} lies inside {@code directory}, both resolved ({@link #realPath}). */
  public static boolean inside(String path, String directory) {
    Path base = realPath(directory);
    Path real = realPath(path);
    return !real.equals(base) && real.startsWith(base);
  }

  /**
   * The path with every symbolic link resolved and {@code .} and {@code ..} taken in order, as
   * Python's {@code os.path.realpath} (not strict): components that do not exist are kept as they
   * are, and a relative path is taken from the working directory.
   */
  public static Path realPath(String path) {
    Path absolute = Paths.get(path).toAbsolutePath();
    Path current = absolute.getRoot();
    Deque<String> rest = new ArrayDeque<>();
    for (Path part : absolute) {
      rest.addLast(part.toString());
    }
    int links = 0;
    while (!rest.isEmpty()) {
      String part = rest.removeFirst();
      if (part.isEmpty() || part.equals(".")) {
        continue;
      }
      if (part.equals("..")) {
        current = current.getParent() == null ? current : current.getParent();
        continue;
      }
      Path next = current.resolve(part);
      if (!Files.isSymbolicLink(next) || links >= MAX_LINKS) {
        current = next;
        continue;
      }
      links++;
      Path target;
      try {
        target = Files.readSymbolicLink(next);
      } catch (IOException e) {
        current = next;
        continue;
      }
      if (target.isAbsolute()) {
        current = target.getRoot();
      }
      Deque<String> parts = new ArrayDeque<>();
      for (Path t : target) {
        parts.addLast(t.toString());
      }
      while (!parts.isEmpty()) {
        rest.addFirst(parts.removeLast());
      }
    }
    return current;
  }

  /** {@code ls -l}'s mode string of a file, as Python's {@code stat.filemode} ("prw-------"). */
  static String fileMode(Path path) {
    int mode;
    try {
      mode = (Integer) Files.getAttribute(path, "unix:mode", LinkOption.NOFOLLOW_LINKS);
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return "?";
    }
    StringBuilder out = new StringBuilder(10);
    out.append(
        switch (mode & 0170000) {
          case 0140000 -> 's';
          case 0120000 -> 'l';
          case 0100000 -> '-';
          case 0060000 -> 'b';
          case 0040000 -> 'd';
          case 0020000 -> 'c';
          case 0010000 -> 'p';
          default -> '?';
        });
    char[] special = {'s', 's', 't'};
    int[] specialBits = {04000, 02000, 01000};
    for (int who = 0; who < 3; who++) {
      int shift = 6 - 3 * who;
      out.append((mode & (4 << shift)) != 0 ? 'r' : '-');
      out.append((mode & (2 << shift)) != 0 ? 'w' : '-');
      boolean x = (mode & (1 << shift)) != 0;
      if ((mode & specialBits[who]) != 0) {
        out.append(x ? special[who] : Character.toUpperCase(special[who]));
      } else {
        out.append(x ? 'x' : '-');
      }
    }
    return out.toString();
  }
}
