"""Replaying token traces: the trace format and the replayer that checks each request."""
