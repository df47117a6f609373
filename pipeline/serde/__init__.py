"""The Avro codec: the local schema registry, stream codecs, whole-batch encoding.

May import: pipeline.errors, pipeline.redaction and pipeline.resources.
"""
