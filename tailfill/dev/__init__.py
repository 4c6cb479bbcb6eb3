"""Development aids: the embedded tansu broker (``broker``), a sample producer (``sample``), failpoints (``faults``)."""
