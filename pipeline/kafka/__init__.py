"""Kafka plumbing every part of Floodgate shares: topics, fetching, retries.

May import: pipeline.errors.
"""
