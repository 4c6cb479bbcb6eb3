"""A job that waits its turn holds no catalog connection, and its handle works as before once its turn comes."""

from helpers import write_demo_pipeline

from tailfill.pipeline.handle import open_pipeline
from tailfill.pipeline.load import load_pipeline


def test_a_pipeline_releases_its_catalog_connections_and_opens_one_again_when_used(tmp_path, home):
    path = write_demo_pipeline(tmp_path / "demo.yaml", "demo", "127.0.0.1:9")  # the broker is never asked
    with open_pipeline(load_pipeline(path)) as pipeline:
        pipeline.provision_tables()
        table = pipeline.catalog.load_table(pipeline.catalog.list_tables(pipeline.cfg.target.namespace)[0])
        pool = pipeline.catalog.engine.pool
        assert pool.checkedin() >= 1  # the connection the calls above used, kept open for the next

        pipeline.release_connections()
        assert pool.checkedin() == 0 and pipeline.catalog.engine.pool.checkedin() == 0

        again = pipeline.catalog.load_table(table.name())  # the same catalog, a new connection
        assert again.metadata_location == table.metadata_location
        assert pipeline.catalog.engine.pool.checkedin() == 1
