"""The worker process: the ZeroMQ loop, its wire format, flow control, routing and addresses."""
