"""Where the service listens unless told otherwise: loopback only. Kept apart from the
modules that import FastAPI and Serve, so the CLI reads them without importing those."""

HOST = "127.0.0.1"  # the public webhook port's
PORT = 8000
ADMIN_HOST = "127.0.0.1"  # the admin endpoint's: beyond loopback it needs a token
ADMIN_PORT = 8001
