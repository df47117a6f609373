"""The shipped query group (``flights.toml``), admission and sweeper files, installed
as the package data of ``pipeline.conf`` (``pipeline/resources.py``)."""
