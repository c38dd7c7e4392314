"""TF Serving's wire formats and services, below both the batch path and the endpoint.

The REST JSON codec (row/columnar predict, classify/regress), TensorProto <-> ndarray, the
TFS REST routes and the gRPC PredictionService/ModelService over a ModelServer, and the
loopback endpoints that handler scripts reach through ``context.rest_uri``/``grpc_port``.
"""
