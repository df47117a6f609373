"""Floodgate's Avro schemas (``*.avsc``), installed as the package data of
``pipeline.schemas`` (``pipeline/resources.py``)."""
