"""Kafka plumbing every part of Floodgate shares: topics, fetching, retries."""
