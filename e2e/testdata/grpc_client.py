#!/usr/bin/env python3
"""A gRPC client of the KServe v2 / Triton API in Python's grpcio, for e2e.

It builds its messages from Triton's own grpc_service.proto and
model_config.proto (a FileDescriptorSet the Go test writes from the
Triton client module it links), so it sees exactly the fields an
official client sees, and calls the server with the compression it is
told: ModelInfer with a long prompt asking for top_k over every step
(a request and a response that compress well), the same on a
ModelStreamInfer stream, and ModelConfig, whose parameters carry
rnnserve's model facts. It prints one JSON object:

  {"infer_sha256": ..., "stream_sha256": ..., "request_bytes": N,
   "response_bytes": N, "config_parameters": {...}, "rnn": {...}}

Usage: grpc_client.py ADDR DESCRIPTORS none|gzip|deflate STEPS MODEL
"""
import hashlib
import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "/inference.GRPCInferenceService/"


def main():
    addr, descriptors, algorithm, steps, model = sys.argv[1:6]
    steps = int(steps)
    fds = descriptor_pb2.FileDescriptorSet.FromString(open(descriptors, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf 4.22 and later
        M = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName("inference." + name))
    else:  # Debian 12's 4.21
        factory = message_factory.MessageFactory(pool)
        M = lambda name: factory.GetPrototype(pool.FindMessageTypeByName("inference." + name))
    compression = {"none": grpc.Compression.NoCompression, "gzip": grpc.Compression.Gzip,
                   "deflate": grpc.Compression.Deflate}[algorithm]

    req = M("ModelInferRequest")(model_name=model)
    inp = req.inputs.add(name="tokens", datatype="INT64", shape=[1, steps])
    inp.contents.int64_contents.extend([97 + i % 3 for i in range(steps)])
    out = req.outputs.add(name="top_k")
    out.parameters["k"].int64_param = 8

    with grpc.insecure_channel(addr) as ch:
        infer = ch.unary_unary(SERVICE + "ModelInfer", request_serializer=M("ModelInferRequest").SerializeToString,
                               response_deserializer=M("ModelInferResponse").FromString)
        resp = infer(req, compression=compression, timeout=60)
        stream = ch.stream_stream(SERVICE + "ModelStreamInfer", request_serializer=M("ModelInferRequest").SerializeToString,
                                  response_deserializer=M("ModelStreamInferResponse").FromString)
        streamed = list(stream(iter([req]), compression=compression, timeout=60))
        config = ch.unary_unary(SERVICE + "ModelConfig", request_serializer=M("ModelConfigRequest").SerializeToString,
                                response_deserializer=M("ModelConfigResponse").FromString)
        cfg = config(M("ModelConfigRequest")(name=model), compression=compression, timeout=60)

    if len(streamed) != 1 or streamed[0].error_message:
        sys.exit("stream: %r" % [s.error_message for s in streamed])
    params = {k: v.string_value for k, v in cfg.config.parameters.items()}
    print(json.dumps({
        "infer_sha256": hashlib.sha256(b"".join(resp.raw_output_contents)).hexdigest(),
        "stream_sha256": hashlib.sha256(b"".join(streamed[0].infer_response.raw_output_contents)).hexdigest(),
        "request_bytes": req.ByteSize(),
        "response_bytes": resp.ByteSize(),
        "config_parameters": sorted(params),
        "rnn": json.loads(params.get("rnn", "{}")),
    }))


if __name__ == "__main__":
    main()
