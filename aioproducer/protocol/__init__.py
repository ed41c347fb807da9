"""The sans-IO Kafka protocol core: pure functions from objects to bytes and back.

Nothing in this package opens a socket, starts a task or reads a clock.
"""
