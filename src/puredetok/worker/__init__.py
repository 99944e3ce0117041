"""The worker process: the ZeroMQ loop, its wire format, clients for both sides, routing and addresses."""
