"""Size limits that the endpoint, the batch job and the handler worker processes share.

Plain numbers, importing nothing: a handler worker process needs them, and not the
environment's settings model (``tfbatch.settings``, pydantic).
"""

MIB = 1024 * 1024
# The default HTTP body limit; gRPC's message limit and a request's decoded-tensor budget default
# to the same figure so both protocols accept the same requests.
MAX_BODY_MB = 100
# gRPC's message cap, TF Serving's default as well: the endpoint, the loopback endpoint a
# batch job opens for handler scripts, and the handler context all use it.
GRPC_MAX_MESSAGE_MB = MAX_BODY_MB
