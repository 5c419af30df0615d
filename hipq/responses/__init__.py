"""Responses: correlation keys, and (later) HTTP and Kafka adapters."""
