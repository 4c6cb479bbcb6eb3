"""Record formats read from a Schema Registry (Avro, Protobuf, JSON Schema) and the types they map to."""
