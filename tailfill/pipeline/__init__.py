"""The edge: a pipeline resolved once — its YAML loaded (``load``), the driver's handle (``handle``),
an executor's context (``executor``) — and handed down to the code that does the work."""
