"""Telemetry sinks: Prometheus metrics, OpenTelemetry spans, the structured log.

Telemetry never decides anything: it records what the guard concluded.
"""
