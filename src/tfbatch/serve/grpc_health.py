"""The standard gRPC health service (``grpc.health.v1.Health``: Check and Watch).

Load balancers and Kubernetes' gRPC probes speak it. ``grpcio-health-checking`` is not a
dependency, so the two messages are described here from the protocol's published definition
(a request with a ``service`` string, a response with a ``status`` enum) and built with
protobuf's own message factory; the bytes on the wire are the standard ones.
"""

from __future__ import annotations

import threading

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "grpc.health.v1.Health"
UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN = 0, 1, 2, 3


def _messages():
    f = descriptor_pb2.FileDescriptorProto(name="tfbatch/grpc_health_v1.proto", package="grpc.health.v1",
                                           syntax="proto3")
    req = f.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    resp = f.message_type.add(name="HealthCheckResponse")
    enum = resp.enum_type.add(name="ServingStatus")
    for name, number in (("UNKNOWN", UNKNOWN), ("SERVING", SERVING), ("NOT_SERVING", NOT_SERVING),
                         ("SERVICE_UNKNOWN", SERVICE_UNKNOWN)):
        enum.value.add(name=name, number=number)
    resp.field.add(name="status", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_ENUM,
                   label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                   type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus")
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with grpcio-health-checking's
    pool.Add(f)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")))


HealthCheckRequest, HealthCheckResponse = _messages()


class HealthService:
    """Status per service name; ``""`` is the server as a whole. Thread-safe."""

    def __init__(self, services=("",)):
        self._status = {name: NOT_SERVING for name in services}
        self._changed = threading.Condition()

    def set(self, status: int, service: str | None = None) -> None:
        with self._changed:
            for name in ([service] if service is not None else list(self._status)):
                self._status[name] = status
            self._changed.notify_all()

    def _current(self, service: str) -> int:
        return self._status.get(service, SERVICE_UNKNOWN)

    def check(self, request, context):
        with self._changed:
            status = self._current(request.service)
        if status == SERVICE_UNKNOWN:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return HealthCheckResponse(status=status)

    def watch(self, request, context):
        last = None
        while context.is_active():
            with self._changed:
                status = self._current(request.service)
                if status == last:
                    self._changed.wait(1.0)  # wakes on a change; the timeout notices a gone client
                    continue
            last = status
            yield HealthCheckResponse(status=status)

    def handler(self) -> grpc.GenericRpcHandler:
        ser, de = HealthCheckResponse.SerializeToString, HealthCheckRequest.FromString
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Check": grpc.unary_unary_rpc_method_handler(self.check, request_deserializer=de, response_serializer=ser),
            "Watch": grpc.unary_stream_rpc_method_handler(self.watch, request_deserializer=de, response_serializer=ser),
        })
