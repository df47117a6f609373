"""Full disks: the checkpoint, the BLOB store and a broker's log directory on a size-limited
tmpfs, filled mid-stream."""
