package io.floodgate.spark.swept;

import java.io.Closeable;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The records of a BLOB chain within {@code [start, end)}, in offset order ({@link
 * SweptRanges#read}), one BLOB file open at a time, each checked as {@link RegisteredBlob} does.
 *
 * <p>A {@link BlobIntegrityException} is thrown from {@link #hasNext}/{@link #next} when a BLOB
 * fails its checks, before any of that BLOB's records, and again from every later call: a reader
 * that catches it and reads on never takes the damaged range as read (as {@code
 * pipeline.swept.reading._Failed} does).
 */
public final class SweptRecords implements Iterator<ConsumerRecord<byte[], byte[]>>, Closeable {
  private final Iterator<BlobRow> blobs;
  private final long start;
  private final long end;
  private final long brokerFrom;
  private final Configuration hadoopConf;
  private RegisteredBlob current;
  private Iterator<ConsumerRecord<byte[], byte[]>> batch = Collections.emptyIterator();
  private ConsumerRecord<byte[], byte[]> pending;
  private boolean done;
  private RuntimeException failure;
  private long count;

  SweptRecords(
      List<BlobRow> chain, long start, long end, long brokerFrom, Configuration hadoopConf) {
    this.blobs = chain.iterator();
    this.start = start;
    this.end = end;
    this.brokerFrom = brokerFrom;
    this.hadoopConf = hadoopConf;
  }

  /** The first offset the chain does not cover: the caller reads the broker from there. */
  public long brokerFrom() {
    return brokerFrom;
  }

  /** Records handed out by {@link #next} so far. */
  public long count() {
    return count;
  }

  @Override
  public boolean hasNext() {
    if (failure != null) {
      throw failure;
    }
    try {
      while (pending == null && !done) {
        if (batch.hasNext()) {
          ConsumerRecord<byte[], byte[]> record = batch.next();
          if (record.offset() >= end) {
            close();
          } else if (record.offset() >= start) {
            pending = record;
          }
        } else if (current != null && current.hasNext()) {
          batch = current.next().iterator();
        } else if (blobs.hasNext()) {
          if (current != null) {
            current.close();
          }
          current = new RegisteredBlob(blobs.next(), hadoopConf);
        } else {
          close();
        }
      }
    } catch (RuntimeException e) {
      failure = e;
      close();
      throw e;
    }
    return pending != null;
  }

  @Override
  public ConsumerRecord<byte[], byte[]> next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    ConsumerRecord<byte[], byte[]> out = pending;
    pending = null;
    count++;
    return out;
  }

  /** Closes the open BLOB file; no record is returned after. */
  @Override
  public void close() {
    done = true;
    if (current != null) {
      current.close();
    }
  }
}
