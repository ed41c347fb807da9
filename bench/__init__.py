"""Benchmarks for aioproducer against other Python Kafka producers.

Run ``python -m bench.producer_compare --help`` (or ``python -m bench``); see ``bench/README.md``.
"""
