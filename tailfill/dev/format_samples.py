"""Sample orders in Avro, Protobuf and JSON Schema, serialized by confluent-kafka's own serializers.

The producers use confluent-kafka's ``SchemaRegistryClient`` and its ``AvroSerializer``,
``ProtobufSerializer`` and ``JSONSerializer``, so the bytes on the topic are the real Confluent wire
format (magic byte, schema id, Protobuf message indexes) and the schemas are registered under
``<topic>-value`` as any producer would. Every order has nested fields (a device struct, a list of
tags, a map of scores), an enum, a decimal, a date and a timestamp.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from confluent_kafka.serialization import MessageField, SerializationContext

from tailfill.dev.sample import _SampleProducer

STATUSES = ("NEW", "PAID", "SHIPPED")
_AVRO = {
    "type": "record", "name": "Order", "namespace": "tailfill.sample",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "device", "type": ["null", {"type": "record", "name": "Device", "fields": [
            {"name": "os", "type": "string"}, {"name": "version", "type": "long"}]}], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": list(STATUSES)}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
# The next version: a field added with a default (BACKWARD compatible).
COUNTRY = {"name": "country", "type": ["null", "string"], "default": None}
_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {
        "order_id": {"type": "string"}, "quantity": {"type": "integer"},
        "device": {"type": "object", "properties": {"os": {"type": "string"}, "version": {"type": "integer"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "status": {"type": "string"}, "day": {"type": "string", "format": "date"},
        "created_at": {"type": "string", "format": "date-time"},
    },
    "required": ["order_id"],
}


def avro_schema(with_country: bool = False) -> dict:
    """The sample order's Avro schema (a fresh copy), optionally the version that adds ``country``."""
    schema = copy.deepcopy(_AVRO)
    if with_country:
        schema["fields"].append(dict(COUNTRY))
    return schema


def json_schema() -> dict:
    return copy.deepcopy(_JSON_SCHEMA)


def sample_order(i: int, country: str | None = None) -> dict:
    """Order ``i`` as the Avro serializer takes it."""
    order = {
        "order_id": f"ord-{i:09d}", "quantity": i % 10, "device": {"os": ("ios", "android")[i % 2], "version": 17},
        "tags": [f"tag-{k}" for k in range(i % 3 + 1)] if i % 5 else ["tag-0", "tag-1"],
        "scores": {"quality": (i % 4) / 2}, "status": STATUSES[i % 3 if i % 7 else 1],
        "amount": Decimal(i).scaleb(-2) + Decimal(i // 100), "day": date(2026, 1, 1) + timedelta(days=i % 28),
        "created_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
    }
    if i == 7:  # a fixed record the unit tests know
        order.update(tags=["tag-0", "tag-1"], scores={"quality": 0.5}, status="PAID", amount=Decimal("7.07"),
                     day=date(2026, 1, 1))
    if country is not None:
        order["country"] = country
    return order


def referencing_order_class() -> type:
    """A Protobuf order whose ``customer`` is a message of another file (``tailfill/sample/customer.proto``):
    confluent-kafka's serializer registers that file as its own subject and the order with a reference to it."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("tailfill.sample.ShopOrder"))
    except KeyError:
        pass
    T = descriptor_pb2.FieldDescriptorProto
    customer = descriptor_pb2.FileDescriptorProto(name="tailfill/sample/customer.proto", package="tailfill.sample",
                                                  syntax="proto3")
    message = customer.message_type.add(name="Customer")
    message.field.add(name="id", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    message.field.add(name="tier", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    pool.Add(customer)
    order = descriptor_pb2.FileDescriptorProto(name="tailfill/sample/shop_order.proto", package="tailfill.sample",
                                               syntax="proto3", dependency=[customer.name])
    message = order.message_type.add(name="ShopOrder")
    message.field.add(name="order_id", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    message.field.add(name="customer", number=2, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                      type_name=".tailfill.sample.Customer")
    return message_factory.GetMessageClass(pool.Add(order).message_types_by_name["ShopOrder"])


def order_class() -> type:
    """The sample order as a Protobuf message class (built from a descriptor: no protoc needed)."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,  # noqa: F401 - registers google/protobuf/timestamp.proto
    )

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("tailfill.sample.Order"))
    except KeyError:
        pass
    f = descriptor_pb2.FileDescriptorProto(name="tailfill/sample/order.proto", package="tailfill.sample",
                                           syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    T = descriptor_pb2.FieldDescriptorProto
    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    order = f.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=T.TYPE_STRING, label=opt)
    order.field.add(name="quantity", number=2, type=T.TYPE_INT32, label=opt)
    order.field.add(name="device", number=3, type=T.TYPE_MESSAGE, label=opt, type_name=".tailfill.sample.Device")
    order.field.add(name="tags", number=4, type=T.TYPE_STRING, label=rep)
    entry = order.nested_type.add(name="ScoresEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=T.TYPE_DOUBLE, label=opt)
    order.field.add(name="scores", number=5, type=T.TYPE_MESSAGE, label=rep,
                    type_name=".tailfill.sample.Order.ScoresEntry")
    order.field.add(name="status", number=6, type=T.TYPE_ENUM, label=opt, type_name=".tailfill.sample.Status")
    order.field.add(name="created_at", number=7, type=T.TYPE_MESSAGE, label=opt,
                    type_name=".google.protobuf.Timestamp")
    device = f.message_type.add(name="Device")
    device.field.add(name="os", number=1, type=T.TYPE_STRING, label=opt)
    device.field.add(name="version", number=2, type=T.TYPE_INT64, label=opt)
    status = f.enum_type.add(name="Status")
    for n, name in enumerate(STATUSES):
        status.value.add(name=name, number=n)
    return message_factory.GetMessageClass(pool.Add(f).message_types_by_name["Order"])


def _protobuf_order(cls: type, i: int) -> Any:
    o = sample_order(i)
    msg = cls(order_id=o["order_id"], quantity=o["quantity"], tags=o["tags"], status=o["status"])
    msg.device.os, msg.device.version = o["device"]["os"], o["device"]["version"]
    msg.scores.update(o["scores"])
    msg.created_at.FromDatetime(o["created_at"])
    return msg


def _json_order(i: int) -> dict:
    """Order ``i`` as JSON Schema takes it (no decimal type: no amount; dates as ISO text)."""
    o = sample_order(i)
    return {**{k: v for k, v in o.items() if k != "amount"}, "day": o["day"].isoformat(),
            "created_at": o["created_at"].isoformat()}


def serializer(kind: str, registry_url: str, with_country: bool = False) -> Callable[[int], Any]:
    """A function turning order ``i`` into the wire-format bytes of ``kind`` (registering the schema)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    if kind == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        ser = AvroSerializer(client, json.dumps(avro_schema(with_country)))
        return lambda i, ctx: ser(sample_order(i, f"c{i % 5}" if with_country else None), ctx)
    if kind == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        cls = order_class()
        pser = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        return lambda i, ctx: pser(_protobuf_order(cls, i), ctx)
    if kind == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        jser = JSONSerializer(json.dumps(json_schema()), client)
        return lambda i, ctx: jser(_json_order(i), ctx)
    raise ValueError(f"no sample for format {kind!r} (avro, protobuf, json_schema)")


def produce_format_sample(bootstrap: str, topic: str, registry_url: str, kind: str, count: int, partitions: int = 4,
                          first: int = 0, with_country: bool = False, not_wire_every: int = 0) -> dict[str, int]:
    """Write orders ``first`` .. ``first + count - 1`` in ``kind``'s wire format; every ``not_wire_every``-th
    is plain JSON instead (not in the wire format, for the quarantine). Returns ``{"good", "bad"}``."""
    encode = serializer(kind, registry_url, with_country)
    ctx = SerializationContext(topic, MessageField.VALUE)
    out = _SampleProducer(bootstrap, topic, partitions, **{"linger.ms": 20, "batch.num.messages": 10000})
    good = bad = 0
    for i in range(first, first + count):
        if not_wire_every and i % not_wire_every == not_wire_every - 1:
            value, bad = json.dumps({"order_id": f"plain-{i}"}).encode(), bad + 1
        else:
            value, good = encode(i, ctx), good + 1
        out.send(i, value)
        if i % 10000 == 0:
            out.producer.poll(0)
    out.finish()
    return {"good": good, "bad": bad}
