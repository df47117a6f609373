"""The Avro codec: the local schema registry, stream codecs, whole-batch encoding."""
